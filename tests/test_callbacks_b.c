/* tests/test_callbacks_b.c - train.h's standard callbacks lr_monitor, gradient_monitor, nan_guard, ema,
   lr_finder, model_summary and accumulation_scheduler: exact values on a small linear model (its
   gradients computed by hand here), the hand-written-loop contract, bad parameters (constructor and
   spec string), and exact resume with all of them registered (with early_stopping and
   model_checkpoint). Built also with -ffast-math (-DNAN_GUARD_ONLY): nan_guard must still fire. */
#define TEST_NO_FSYNC /* what it checks needs no flush to the disk (tests/test.h) */
#include "test.h"


/* ---- the model: y = w.x + b, MSE, 8 samples in batches of 2 ------------------------------------- */
#define NS 8
#define BS 2
#define NBATCH (NS / BS)
typedef struct lin {
  float p[4], g[4];               /* w[3], b */
  float x[NS][3], y[NS];
  int64_t backwards;              /* backward calls so far */
  tr_trainer *t;
  int64_t nan_grad_at;            /* > 0: the training batch with this number (1-based, over epochs) adds NaN to b's gradient */
  int64_t nan_loss_at;            /* > 0: the forward call with this number returns a NaN loss */
  int64_t forwards;
  float val_p[4];                 /* the parameters the last validation forward saw */
  memlog log;
} lin;
static const tr_tensor lin_tensors[] = { { "w", 0, 3 }, { "b", 3, 1 } };

static int lin_forward(void *user, void *batch, int training, double *loss) {
  lin *m = (lin *)user;
  int i = (int)(intptr_t)batch, k, j;
  double sum = 0;
  if (training) m->forwards++;
  else memcpy(m->val_p, m->p, sizeof m->p);
  for (k = i * BS; k < i * BS + BS; k++) {
    double pred = m->p[3];
    for (j = 0; j < 3; j++) pred += (double)m->p[j] * m->x[k][j];
    sum += (pred - m->y[k]) * (pred - m->y[k]);
  }
  *loss = training && m->nan_loss_at == m->forwards ? NAN : sum / BS;
  return 0;
}
static int lin_backward(void *user, void *batch) {
  lin *m = (lin *)user;
  int i = (int)(intptr_t)batch, k, j;
  m->backwards++;
  for (k = i * BS; k < i * BS + BS; k++) {
    double pred = m->p[3], d;
    for (j = 0; j < 3; j++) pred += (double)m->p[j] * m->x[k][j];
    d = 2 * (pred - m->y[k]) / BS;
    for (j = 0; j < 3; j++) m->g[j] += (float)(d * m->x[k][j]);
    m->g[3] += (float)d;
  }
  if (m->nan_grad_at && m->t->epoch * NBATCH + m->t->epoch_batch + 1 == m->nan_grad_at && m->t->running == HK_STAGE_FIT &&
      m->t->tr__cfg && m->t->ctx.event != HK_ON_FIT_START) /* not in lr_finder's sweep */
    m->g[3] += NAN;
  return 0;
}
static int64_t lin_count(void *user) { (void)user; return NBATCH; }
static int lin_get(void *user, int64_t i, void **batch) { (void)user; *batch = (void *)(intptr_t)i; return 0; }

static tr_data g_train, g_val;
static void lin_init(lin *m, tr_trainer *t, tr_optim_kind kind, double lr) {
  int k;
  memset(m, 0, sizeof *m);
  for (k = 0; k < NS; k++) {
    m->x[k][0] = (float)k / NS;
    m->x[k][1] = (float)((k * 5) % 7) / 7;
    m->x[k][2] = k % 2 ? 1.0f : -0.5f;
    m->y[k] = 1.5f * m->x[k][0] - 2.0f * m->x[k][1] + 0.5f * m->x[k][2] + 0.25f;
  }
  m->p[0] = 0.1f;
  m->p[1] = -0.2f;
  m->p[2] = 0.3f;
  memlog_open(&m->log);
  m->t = t;
  assert_int_equal(tr_init(t, &(tr_desc){ .model = { .params = m->p, .grads = m->g, .n_params = 4, .tensors = lin_tensors,
                                                     .n_tensors = 2, .user = m, .forward = lin_forward, .backward = lin_backward },
                                          .optim = { .kind = kind, .lr = lr, .momentum = kind == TR_OPTIM_SGD ? 0.5 : 0,
                                                     .weight_decay = 0.01 }, .seed = 11, .log = m->log.f }), TR_OK);
  g_train = test_data(lin_count, lin_get, m);
  g_val = g_train;
}
static const char *lin_logtext(lin *m) { return memlog_text(&m->log); }
static void lin_free(lin *m, tr_trainer *t) {
  tr_free(t);
  memlog_close(&m->log);
}
static tr_config lin_cfg(int64_t max_epochs) { return test_config(&g_train, &g_val, max_epochs); }

/* =================================================================================================
   nan_guard
   ================================================================================================= */
static void test_nan_guard_fail(void **state) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(3);
  hk_handle h;
  (void)state;
  lin_init(&m, &t, TR_OPTIM_SGD, 0.05);
  m.nan_grad_at = 6;
  assert_int_equal(tr_nan_guard(t.reg, &(tr_nan_guard_desc){ 0 }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_ERR_HOOK);
  assert_non_null(strstr(tr_error(&t), "gradient of 'b'[0] is nan at epoch 1, batch 1, step 6"));
  assert_int_equal(t.global_step, 5);
  assert_int_equal(tr_nan_guard_get(t.reg, h)->found, 1);
  lin_free(&m, &t);
}
/* The failure names nan_guard once ("callback 'nan_guard' failed in ...: <why>", not "...: nan_guard: <why>"),
   in train.h's trainer and in a loop of one's own, whose tr_run_finish returns the error (its exit status:
   examples/own_loop.c exits 2) (issue 28 item 17). */
static void test_nan_guard_fail_names_once(void **state) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(3);
  hk_registry *reg;
  hk_ctx ctx;
  hk_flow flow;
  tr_run_desc rd;
  (void)state;
  lin_init(&m, &t, TR_OPTIM_SGD, 0.05);
  m.nan_grad_at = 6;
  assert_int_equal(tr_nan_guard(t.reg, &(tr_nan_guard_desc){ 0 }, NULL), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_ERR_HOOK);
  assert_string_equal(tr_error(&t), "callback 'nan_guard' failed in on_before_optimizer_step: gradient of 'b'[0] is nan at epoch 1, batch 1, step 6");
  lin_free(&m, &t);

  reg = hk_create(NULL);
  memset(&ctx, 0, sizeof ctx);
  memset(&flow, 0, sizeof flow);
  memset(&rd, 0, sizeof rd);
  rd.epochs = TR_NO;
  rd.log_every_n_steps = -1;
  rd.no_signals = 1;
  rd.log = tmpfile();
  assert_int_equal(tr_add_factories(reg), HK_OK);
  assert_int_equal(tr_run_setup(reg, &rd), TR_OK);
  assert_int_equal(hk_spec_apply(reg, "nan_guard"), HK_OK);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  ctx.loss = NAN;
  (void)HK_FIRE_FLOW(reg, HK_ON_BEFORE_BACKWARD, &ctx, &flow);
  (void)tr_run_batch_end(reg, &ctx, &flow);
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_ERR_HOOK); /* the loop's exit status comes from this */
  assert_string_equal(tr_run_error(reg), "callback 'nan_guard' failed in on_before_backward: the training loss is nan at epoch 0, batch 0, step 1");
  fclose(rd.log);
  hk_ctx_free(&ctx);
  hk_destroy(reg);
}
static void test_nan_guard_skip_and_stop(void **state) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(3);
  hk_handle h;
  float before[4];
  (void)state;
  /* skip_step: the step with the NaN gradient is dropped, training goes on with finite weights */
  lin_init(&m, &t, TR_OPTIM_SGD, 0.05);
  m.nan_grad_at = 6;
  assert_int_equal(hk_spec_apply(t.reg, "nan_guard(action=skip_step)"), HK_OK);
  h = hk_find(t.reg, "nan_guard");
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(t.global_step, 11); /* 12 batches, one step skipped */
  assert_int_equal(tr_nan_guard_get(t.reg, h)->skipped, 1);
  assert_true(hk_is_finitef(m.p[3]));
  assert_non_null(strstr(lin_logtext(&m), "nan_guard: gradient of 'b'[0] is nan at epoch 1, batch 1, step 6: step skipped"));
  lin_free(&m, &t);
  /* a NaN loss (the trainer leaves it to the guard): stop gracefully after that batch */
  lin_init(&m, &t, TR_OPTIM_SGD, 0.05);
  m.nan_loss_at = 3;
  c.on_nonfinite_loss = TR_NONFINITE_IGNORE;
  assert_int_equal(tr_nan_guard(t.reg, &(tr_nan_guard_desc){ .action = TR_NAN_STOP, .check_grads = TR_NO }, &h), TR_OK);
  memcpy(before, m.p, sizeof before);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(t.epoch, 1); /* the epoch ends as usual, then training stops */
  assert_non_null(strstr(tr_nan_guard_get(t.reg, h)->last, "the training loss is nan at epoch 0, batch 2"));
  lin_free(&m, &t);
}
/* action=stop on non-finite gradients: the step is skipped too (the weights stay finite), then training
   stops; in a hand-written loop the same flow: HK_SKIP_STEP at on_before_optimizer_step, HK_STOP at
   on_train_batch_end */
static void test_nan_guard_stop_skips_step(void **state) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(3);
  hk_handle h;
  hk_registry *reg;
  hk_ctx ctx;
  hk_flow flow = { 0 };
  float b[2] = { 1, NAN };
  hk_tensor g[1] = { { "b", b, 2, 0 } };
  char path[64];
  int k;
  (void)state;
  lin_init(&m, &t, TR_OPTIM_SGD, 0.05);
  m.nan_grad_at = 6;
  snprintf(path, sizeof path, "/tmp/test_nan_guard_stop.%ld.ckpt", (long)getpid());
  assert_int_equal(tr_nan_guard(t.reg, &(tr_nan_guard_desc){ .action = TR_NAN_STOP }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(t.global_step, 5);  /* batch 6's step was not taken */
  assert_int_equal(t.epoch, 2);        /* the epoch ended as usual, then training stopped */
  for (k = 0; k < 4; k++) assert_true(hk_is_finitef(m.p[k]));
  assert_int_equal(tr_nan_guard_get(t.reg, h)->skipped, 1);
  assert_non_null(strstr(lin_logtext(&m), "gradient of 'b'[0] is nan at epoch 1, batch 1, step 6: step skipped, stopping training"));
  assert_int_equal(tr_save(&t, path), TR_OK); /* and so is what a checkpoint of it holds */
  memset(m.p, 0, sizeof m.p);
  assert_int_equal(tr_load(&t, path), TR_OK);
  for (k = 0; k < 4; k++) assert_true(hk_is_finitef(m.p[k]));
  remove(path);
  lin_free(&m, &t);
  /* a hand-written loop */
  reg = hk_create(NULL);
  memset(&ctx, 0, sizeof ctx);
  ctx.stage = HK_STAGE_FIT;
  ctx.grads = g;
  ctx.n_tensors = 1;
  assert_int_equal(tr_add_factories(reg), HK_OK);
  assert_int_equal(hk_spec_apply(reg, "nan_guard(action=stop, verbose=false)"), HK_OK);
  HK_FIRE_FLOW(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &ctx, &flow);
  assert_true(HK_FLOW_HAS(&flow, HK_FLOW_SKIP_STEP));
  assert_false(HK_FLOW_HAS(&flow, HK_FLOW_STOP));
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);
  assert_true(HK_FLOW_HAS(&flow, HK_FLOW_STOP));
  flow.signals = 0;
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow); /* once */
  assert_int_equal(flow.signals, 0);
  hk_ctx_free(&ctx);
  hk_destroy(reg);
}

/* a hand-written loop, values chosen by hand: the first non-finite entry is named, and -inf too */
static void test_nan_guard_own_loop(void **state) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  float a[3] = { 1, 2, 3 }, b[2] = { 4, 0 };
  hk_tensor g[2] = { { "a", a, 3, 0 }, { "b", b, 2, 0 } };
  hk_handle h;
  (void)state;
  memset(&ctx, 0, sizeof ctx);
  ctx.stage = HK_STAGE_FIT;
  ctx.grads = g;
  ctx.n_tensors = 2;
  ctx.global_step = 9;
  assert_int_equal(tr_add_factories(reg), HK_OK);
  assert_int_equal(hk_spec_apply(reg, "nan_guard(action=skip_step, verbose=false)"), HK_OK);
  h = hk_find(reg, "nan_guard");
  ctx.loss = 1.0;
  assert_int_equal(HK_FIRE(reg, HK_ON_BEFORE_BACKWARD, &ctx), HK_CONTINUE);
  assert_int_equal(HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &ctx), HK_CONTINUE);
  b[1] = -INFINITY;
  hk_grads_changed(&ctx);
  assert_int_equal(HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &ctx), HK_SKIP_STEP);
  assert_non_null(strstr(tr_nan_guard_get(reg, h)->last, "gradient of 'b'[1] is -inf"));
  assert_non_null(strstr(tr_nan_guard_get(reg, h)->last, "step 10"));
  ctx.loss = INFINITY;
  assert_int_equal(HK_FIRE(reg, HK_ON_BEFORE_BACKWARD, &ctx), HK_SKIP_STEP);
  assert_non_null(strstr(tr_nan_guard_get(reg, h)->last, "the training loss is inf"));
  assert_int_equal(tr_nan_guard_get(reg, h)->found, 2);
  hk_ctx_free(&ctx);
  hk_destroy(reg);
}

#ifndef NAN_GUARD_ONLY

/* =================================================================================================
   lr_monitor
   ================================================================================================= */
typedef struct lr_rec { const char *name; double seen[64], lr[64]; int n; } lr_rec;
static hk_signal rec_lr(hk_ctx *ctx, void *user) {
  lr_rec *r = (lr_rec *)user;
  if (r->n < 64 && hk_metric_get(ctx, r->name, &r->seen[r->n])) r->lr[r->n++] = ctx->lr;
  return HK_CONTINUE;
}
static void test_lr_monitor(void **state) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(3);
  lr_rec r = { "lr-AdamW", { 0 }, { 0 }, 0 };
  hk_handle h;
  double v;
  int i;
  (void)state;
  /* AdamW with a cosine schedule, step interval: every training batch sees its own lr */
  lin_init(&m, &t, TR_OPTIM_ADAMW, 0.1);
  t.sched.kind = TR_SCHED_COSINE;
  t.sched.total = 12;
  assert_int_equal(tr_lr_monitor(t.reg, &(tr_lr_monitor_desc){ .log_momentum = TR_YES, .log_weight_decay = TR_YES }, &h), TR_OK);
  hk_on(t.reg, HK_ON_TRAIN_BATCH_END, rec_lr, &r, &(hk_opts){ .name = "rec" }, NULL);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(r.n, 12);
  for (i = 0; i < r.n; i++) assert_true(r.seen[i] == r.lr[i]);
  assert_true(r.seen[0] == 0.1 && r.seen[11] < r.seen[1]); /* the cosine decays */
  assert_true(hk_metric_get(&t.ctx, "lr-AdamW-momentum", &v) && v == 0.9);
  assert_true(hk_metric_get(&t.ctx, "lr-AdamW-weight_decay", &v) && v == 0.01);
  assert_string_equal(tr_lr_monitor_get(t.reg, h)->name, "lr-AdamW");
  assert_int_equal(tr_lr_monitor_get(t.reg, h)->per_epoch, 0);
  assert_int_equal(tr_lr_monitor_get(t.reg, h)->groups, 0); /* no groups: the one lr, as before */
  assert_int_equal(hk_metric_get(&t.ctx, "lr-AdamW/pg1", NULL), 0);
  lin_free(&m, &t);
  /* SGD, a per-epoch step schedule: lr-SGD is the epoch's lr, set at its start (auto interval) */
  lin_init(&m, &t, TR_OPTIM_SGD, 0.1);
  t.sched.kind = TR_SCHED_STEP;
  t.sched.per_epoch = 1;
  t.sched.step_size = 1;
  t.sched.gamma = 0.5;
  r.name = "lr-SGD";
  r.n = 0;
  assert_int_equal(hk_spec_apply(t.reg, "lr_monitor(log_momentum=true)"), HK_OK);
  h = hk_find(t.reg, "lr_monitor");
  hk_on(t.reg, HK_ON_TRAIN_EPOCH_START, rec_lr, &r, &(hk_opts){ .name = "rec" }, NULL);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(r.n, 3);
  assert_true(r.seen[0] == 0.1 && r.seen[1] == 0.05 && r.seen[2] == 0.025);
  assert_true(hk_metric_get(&t.ctx, "lr-SGD-momentum", &v) && v == 0.5);
  assert_int_equal(hk_metric_get(&t.ctx, "lr-SGD-weight_decay", &v), 0);
  assert_int_equal(tr_lr_monitor_get(t.reg, h)->per_epoch, 1);
  lin_free(&m, &t);
  /* a name of one's own, and a hand-written loop */
  {
    hk_registry *reg = hk_create(NULL);
    hk_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    assert_int_equal(tr_add_factories(reg), HK_OK);
    assert_int_equal(hk_spec_apply(reg, "lr_monitor(name=lr-main, logging_interval=step)"), HK_OK);
    ctx.lr = 0.25;
    HK_FIRE(reg, HK_ON_TRAIN_START, &ctx);
    ctx.lr = 0.125;
    assert_true(hk_metric_get(&ctx, "lr-main", &v) && v == 0.125);
    hk_ctx_free(&ctx);
    hk_destroy(reg);
  }
}

/* log_momentum / log_weight_decay: every training record that has the lr has them too, as Lightning's
   rows (issue 28 item 6: only the first row had them). */
typedef struct lr_rows { int rows, with_lr, with_mom, with_wd; double mom, wd; } lr_rows;
static hk_signal count_lr_rows(hk_ctx *ctx, void *user) { /* last: what the loggers write */
  lr_rows *r = (lr_rows *)user;
  const tr_log_record *rec = tr_log_current(ctx);
  double v;
  if (!rec || strcmp(rec->stage, "train")) return HK_CONTINUE;
  r->rows++;
  r->with_lr += tr_log_get(rec, "lr-SGD", &v);
  if (tr_log_get(rec, "lr-SGD-momentum", &v)) { r->with_mom++; r->mom = v; }
  if (tr_log_get(rec, "lr-SGD-weight_decay", &v)) { r->with_wd++; r->wd = v; }
  return HK_CONTINUE;
}
static void test_lr_monitor_every_row(void **state) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(3);
  lr_rows r;
  int per_epoch;
  (void)state;
  for (per_epoch = 0; per_epoch < 2; per_epoch++) {
    memset(&r, 0, sizeof r);
    lin_init(&m, &t, TR_OPTIM_SGD, 0.1);
    t.sched.per_epoch = per_epoch;
    c.log_every_n_steps = 1;
    assert_int_equal(hk_spec_apply(t.reg, "lr_monitor(log_momentum=true, log_weight_decay=true)"), HK_OK);
    assert_int_equal(hk_on(t.reg, HK_ON_LOG, count_lr_rows, &r, &(hk_opts){ .name = "rows", .order = INT_MAX, .monitor = 1 }, NULL), HK_OK);
    assert_int_equal(tr_fit(&t, &c), TR_OK);
    if (per_epoch) assert_int_equal(r.with_lr, 3); /* one record per epoch */
    else assert_int_equal(r.with_lr, 3 * NBATCH); /* every step's */
    assert_int_equal(r.with_mom, r.with_lr);
    assert_int_equal(r.with_wd, r.with_lr);
    assert_true(r.mom == 0.5 && r.wd == 0.01);
    lin_free(&m, &t);
  }
}

/* Parameter groups: one lr per group, Lightning's names (lr-AdamW/pg1, ...; one group: lr-AdamW), each the lr
   its tensors are updated with (tr_run_tensor_opt), in tr_fit and in a loop of your own. */
typedef struct lr_pg { const char *names[3]; double v[3][64], lr[64], wd[3]; int n, rows, with[3], with_plain; } lr_pg;
static hk_signal rec_pg(hk_ctx *ctx, void *user) { /* every batch: what a hook reads */
  lr_pg *r = (lr_pg *)user;
  int k;
  if (r->n >= 64) return HK_CONTINUE;
  for (k = 0; k < 3 && r->names[k]; k++)
    if (!hk_metric_get(ctx, r->names[k], &r->v[k][r->n])) r->v[k][r->n] = -1;
  r->lr[r->n++] = ctx->lr;
  return HK_CONTINUE;
}
static hk_signal rows_pg(hk_ctx *ctx, void *user) { /* last at on_log: what the loggers write */
  lr_pg *r = (lr_pg *)user;
  const tr_log_record *rec = tr_log_current(ctx);
  char wd[64];
  double v;
  int k;
  if (!rec || strcmp(rec->stage, "train")) return HK_CONTINUE;
  r->rows++;
  for (k = 0; k < 3 && r->names[k]; k++) {
    r->with[k] += tr_log_get(rec, r->names[k], &v);
    snprintf(wd, sizeof wd, "%s-weight_decay", r->names[k]);
    if (tr_log_get(rec, wd, &v)) r->wd[k] = v;
  }
  r->with_plain += tr_log_get(rec, "lr-AdamW", &v) + tr_log_get(rec, "lr-SGD", &v);
  return HK_CONTINUE;
}
static void pg_watch(hk_registry *reg, lr_pg *r, hk_event at, const char *n0, const char *n1) {
  memset(r, 0, sizeof *r);
  r->names[0] = n0;
  r->names[1] = n1;
  assert_int_equal(hk_on(reg, at, rec_pg, r, &(hk_opts){ .name = "rec_pg" }, NULL), HK_OK);
  assert_int_equal(hk_on(reg, HK_ON_LOG, rows_pg, r, &(hk_opts){ .name = "rows_pg", .order = INT_MAX, .monitor = 1 }, NULL), HK_OK);
}
static void test_lr_monitor_groups(void **state) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(3);
  lr_pg r;
  hk_handle h;
  double v;
  int i;
  (void)state;
  /* tr_fit, AdamW, cosine, step interval: w (pg1) at the lr, b (pg2) at twice it and no decay */
  lin_init(&m, &t, TR_OPTIM_ADAMW, 0.1);
  t.sched.kind = TR_SCHED_COSINE;
  t.sched.total = 12;
  c.log_every_n_steps = 1;
  assert_int_equal(hk_spec_apply(t.reg, "lr_monitor(log_weight_decay=true); param_group(match=b, lr_mult=2, weight_decay=0)"), HK_OK);
  h = hk_find(t.reg, "lr_monitor");
  pg_watch(t.reg, &r, HK_ON_TRAIN_BATCH_END, "lr-AdamW/pg1", "lr-AdamW/pg2");
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(tr_lr_monitor_get(t.reg, h)->groups, 2);
  assert_int_equal(r.n, 12);
  for (i = 0; i < r.n; i++) {
    assert_true(r.v[0][i] == r.lr[i]);
    assert_true(r.v[1][i] == 2 * r.lr[i]);
  }
  assert_true(r.lr[11] < r.lr[1]); /* the cosine decays */
  assert_int_equal(r.rows, 12); /* every record has both, and not the one lr */
  assert_true(r.with[0] == 12 && r.with[1] == 12 && r.with_plain == 0);
  assert_true(r.wd[0] == 0.01 && r.wd[1] == 0);
  assert_int_equal(hk_metric_get(&t.ctx, "lr-AdamW", NULL), 0);
  lin_free(&m, &t);
  /* one group over every tensor: Lightning's plain name, with the group's lr */
  lin_init(&m, &t, TR_OPTIM_ADAMW, 0.1);
  c.log_every_n_steps = 0;
  assert_int_equal(hk_spec_apply(t.reg, "lr_monitor; param_group(match=w|b, lr_mult=0.5)"), HK_OK);
  h = hk_find(t.reg, "lr_monitor");
  pg_watch(t.reg, &r, HK_ON_TRAIN_BATCH_END, "lr-AdamW", "lr-AdamW/pg1");
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(tr_lr_monitor_get(t.reg, h)->groups, 1);
  for (i = 0; i < r.n; i++) assert_true(r.v[0][i] == 0.5 * r.lr[i] && r.v[1][i] == -1);
  lin_free(&m, &t);
  /* finetuning, epoch interval, lr_monitor first in the spec: the backbone w frozen (lr 0) in epoch 0, then at
     0.25 and 0.5 of the run's lr; one record per epoch with both */
  lin_init(&m, &t, TR_OPTIM_SGD, 0.1);
  c.log_every_n_steps = 1;
  assert_int_equal(hk_spec_apply(t.reg, "lr_monitor(logging_interval=epoch, log_weight_decay=true); "
                                        "finetuning(match=w, unfreeze_at_epoch=1, initial_ratio=0.25, lr_factor=2)"), HK_OK);
  h = hk_find(t.reg, "lr_monitor");
  pg_watch(t.reg, &r, HK_ON_TRAIN_EPOCH_START, "lr-SGD/pg1", "lr-SGD/pg2");
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(tr_lr_monitor_get(t.reg, h)->groups, 2);
  assert_int_equal(r.n, 3);
  assert_true(r.v[0][0] == 0 && r.v[0][1] == 0.25 * 0.1 && r.v[0][2] == 0.5 * 0.1);
  assert_true(r.v[1][0] == 0.1 && r.v[1][1] == 0.1 && r.v[1][2] == 0.1);
  assert_true(r.with[0] == 3 && r.with[1] == 3 && r.with_plain == 0); /* only the epochs' own records */
  assert_true(r.wd[0] == 0.01 && r.wd[1] == 0.01);
  lin_free(&m, &t);
  /* a loop of your own (tr_run_begin / tr_run_next): AdamW, b at 0.5 x, read after every step */
  {
    static const char *names[] = { "w", "b" };
    static const size_t sizes[] = { 3, 1 };
    float p[4] = { 0 }, g[4] = { 0 }, *pp = p, *gp = g;
    hk_registry *reg = hk_create(NULL);
    hk_ctx *ctx;
    int steps = 0;
    ctx = tr_run_begin(reg, &(tr_run_desc){ .max_epochs = 2, .train_batches = 3, .validation = TR_NO, .lr = 0.2,
                                            .optimizer = "AdamW", .weight_decay = 0.1, .log_every_n_steps = 2, .no_signals = 1,
                                            TR_TENSORS(&pp, &gp, names, sizes),
                                            .spec = "param_group(match=b, lr_mult=0.5); lr_monitor(log_weight_decay=true)" }, NULL);
    assert_non_null(ctx);
    h = hk_find(reg, "lr_monitor");
    pg_watch(reg, &r, HK_ON_TRAIN_BATCH_END, "lr-AdamW/pg1", "lr-AdamW/pg2");
    while (tr_run_next(reg)) {
      ctx->loss = 1;
      if (!tr_run_update(reg)) continue;
      steps++;
      assert_true(hk_metric_get(ctx, "lr-AdamW/pg1", &v) && v == tr_run_tensor_opt(reg, 0, ctx->lr, ctx->global_step).lr);
      assert_true(hk_metric_get(ctx, "lr-AdamW/pg2", &v) && v == tr_run_tensor_opt(reg, 1, ctx->lr, ctx->global_step).lr);
      assert_true(v == 0.5 * 0.2);
    }
    assert_int_equal(tr_lr_monitor_get(reg, h)->groups, 2);
    assert_int_equal(tr_run_end(reg), TR_OK);
    assert_int_equal(steps, 6);
    assert_int_equal(r.n, 6);
    for (i = 0; i < r.n; i++) assert_true(r.v[0][i] == 0.2 && r.v[1][i] == 0.1);
    assert_true(r.rows == 3 && r.with[0] == 3 && r.with[1] == 3 && r.with_plain == 0); /* the run's records, every 2 steps */
    assert_true(r.wd[0] == 0.1 && r.wd[1] == 0.1);
    hk_destroy(reg);
  }
}

/* =================================================================================================
   gradient_monitor
   ================================================================================================= */
typedef struct gm_rec { int due, checked, wrong; int64_t checks_before; hk_handle h; } gm_rec;
static hk_signal rec_gm(hk_ctx *ctx, void *user) {
  gm_rec *r = (gm_rec *)user;
  const tr_gradient_monitor_state *s = tr_gradient_monitor_get(ctx->reg, r->h);
  double total = 0, wn = 0, v;
  size_t i;
  int k;
  for (k = 0; k < ctx->n_tensors; k++)
    for (i = 0; i < ctx->grads[k].count; i++) {
      double x = ctx->grads[k].data[i];
      total += x * x;
      if (k == 0) wn += x * x;
    }
  if ((ctx->global_step + 1) % 5 == 0) {
    r->due++;
    if (s->checks != r->checks_before + 1) r->wrong++;
    if (!hk_metric_get(ctx, "grad_2.0_norm_total", &v) || fabs(v - sqrt(total)) > 1e-12 * (1 + v)) r->wrong++;
    if (v != hk_grad_norm(ctx)) r->wrong++; /* the same bits as hooks.h's norm (before clipping) */
    if (!hk_metric_get(ctx, "grad_2.0_norm/w", &v) || fabs(v - sqrt(wn)) > 1e-12 * (1 + v)) r->wrong++;
    r->checked++;
  } else if (s->checks != r->checks_before) r->wrong++; /* not due: nothing ran */
  r->checks_before = s->checks;
  return HK_CONTINUE;
}
static void test_gradient_monitor_fit(void **state) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(5);
  gm_rec r;
  (void)state;
  memset(&r, 0, sizeof r);
  lin_init(&m, &t, TR_OPTIM_ADAMW, 0.01);
  c.gradient_clip_val = 1e-3; /* the norms are those before clipping */
  assert_int_equal(tr_gradient_monitor(t.reg, &(tr_gradient_monitor_desc){ .log_frequency = 5, .vanishing_threshold = -1, .exploding_threshold = -1 }, &r.h), TR_OK);
  hk_on(t.reg, HK_ON_BEFORE_OPTIMIZER_STEP, rec_gm, &r, &(hk_opts){ .name = "rec", .order = 100 }, NULL);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(t.global_step, 20);
  assert_int_equal(r.due, 4); /* steps 5, 10, 15, 20 */
  assert_int_equal(r.checked, 4);
  assert_int_equal(r.wrong, 0);
  assert_int_equal(tr_gradient_monitor_get(t.reg, r.h)->checks, 4);
  assert_int_equal(tr_gradient_monitor_get(t.reg, r.h)->n_tensors, 2);
  lin_free(&m, &t);
}
static int g_hist_calls;
static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}
/* percentiles against a sort, on values with many ties (the selection must handle them) */
static void test_gradient_monitor_percentiles(void **state) {
  enum { N = 1001 };
  static float g[N], sorted[N];
  static const double q[] = { 0, 25, 33.3, 50, 99.9, 100 };
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_tensor v = { "g", g, N, 0 };
  tr_rng r;
  int i;
  (void)state;
  tr_rng_seed(&r, 5);
  for (i = 0; i < N; i++) g[i] = (float)((int)tr_rng_below(&r, 50) - 25) / 8;
  for (i = 0; i < N; i++) sorted[i] = fabsf(g[i]);
  qsort(sorted, N, sizeof(float), cmp_float);
  memset(&ctx, 0, sizeof ctx);
  ctx.grads = &v;
  ctx.n_tensors = 1;
  assert_int_equal(tr_add_factories(reg), HK_OK);
  assert_int_equal(hk_spec_apply(reg, "gradient_monitor(log_frequency=1, percentiles=\"0,25,33.3,50,99.9,100\")"), HK_OK);
  HK_FIRE(reg, HK_ON_TRAIN_START, &ctx);
  HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &ctx);
  for (i = 0; i < 6; i++) {
    char name[32];
    double pos = q[i] / 100 * (N - 1), want, got;
    size_t lo = (size_t)pos;
    want = sorted[lo] + (pos - (double)lo) * (lo + 1 < N ? sorted[lo + 1] - sorted[lo] : 0);
    snprintf(name, sizeof name, "grad_abs_p%g", q[i]);
    assert_true(hk_metric_get(&ctx, name, &got));
    if (fabs(got - want) > 1e-12) fail_msg("%s: %g, want %g", name, got, want);
  }
  hk_destroy(reg);
  hk_ctx_free(&ctx);
}
static void on_hist(const tr_histogram *h, hk_ctx *ctx, void *user) {
  (void)ctx;
  (void)user;
  g_hist_calls++;
  assert_int_equal(h->step, 50);
}
/* exact values in a hand-written loop: gradients 1..100 (tensor "layer.weight") and -1 ("layer.bias") */
static void test_gradient_monitor_values(void **state) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  float a[100], b[1] = { -1 };
  hk_tensor g[2] = { { "layer.weight", a, 100, 0 }, { "layer.bias", b, 1, 0 } };
  hk_handle h;
  const tr_gradient_monitor_state *s;
  double v, sq = 0;
  int i;
  (void)state;
  for (i = 0; i < 100; i++) { a[i] = (float)(100 - i); sq += (double)(i + 1) * (i + 1); }
  memset(&ctx, 0, sizeof ctx);
  ctx.grads = g;
  ctx.n_tensors = 2;
  assert_int_equal(tr_add_factories(reg), HK_OK);
  assert_int_equal(hk_spec_apply(reg, "gradient_monitor(log_frequency=50, percentiles=\"10, 50,90,100\", exploding_threshold=500)"), HK_OK);
  h = hk_find(reg, "gradient_monitor");
  assert_int_equal(tr_gradient_monitor(NULL, NULL, NULL), TR_ERR_INVALID);
  HK_FIRE(reg, HK_ON_TRAIN_START, &ctx);
  ctx.global_step = 48; /* the 49th step: not due */
  HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &ctx);
  s = tr_gradient_monitor_get(reg, h);
  assert_int_equal(s->checks, 0);
  assert_int_equal(hk_metric_get(&ctx, "grad_2.0_norm_total", &v), 0);
  ctx.global_step = 49; /* the 50th: due */
  HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &ctx);
  assert_int_equal(s->checks, 1);
  assert_true(hk_metric_get(&ctx, "grad_2.0_norm_total", &v) && fabs(v - sqrt(sq + 1)) < 1e-9);
  assert_true(hk_metric_get(&ctx, "grad_2.0_norm/layer.bias", &v) && v == 1);
  /* |g| = 1, 1..100 (101 values): numpy.percentile(q=10) = 10.0, 50 -> 50.0, 90 -> 90.0, 100 -> 100 */
  assert_true(hk_metric_get(&ctx, "grad_abs_p10", &v) && fabs(v - 10.0) < 1e-9);
  assert_true(hk_metric_get(&ctx, "grad_abs_p50", &v) && fabs(v - 50.0) < 1e-9);
  assert_true(hk_metric_get(&ctx, "grad_abs_p90", &v) && fabs(v - 90.0) < 1e-9);
  assert_true(hk_metric_get(&ctx, "grad_abs_p100", &v) && v == 100);
  assert_true(hk_metric_get(&ctx, "grad_exploding", &v) && v == 1); /* norm 581.6 > 500 */
  assert_true(hk_metric_get(&ctx, "grad_vanishing", &v) && v == 0);
  assert_int_equal(s->exploding, 1);
  assert_null(s->histogram);
  hk_destroy(reg);
  hk_ctx_free(&ctx);

  /* param_filter, a histogram handed to a logger, no per-tensor norms */
  reg = hk_create(NULL);
  memset(&ctx, 0, sizeof ctx);
  ctx.grads = g;
  ctx.n_tensors = 2;
  assert_int_equal(tr_add_factories(reg), HK_OK);
  {
    tr_trainer fake; /* tr_gradient_monitor needs a trainer only for its registry */
    memset(&fake, 0, sizeof fake);
    fake.reg = reg;
    g_hist_calls = 0;
    assert_int_equal(tr_gradient_monitor(fake.reg, &(tr_gradient_monitor_desc){ .param_filter = "nothing,weight", .histogram_bins = 4,
                     .per_tensor = TR_NO, .on_histogram = on_hist }, &h), TR_OK);
  }
  HK_FIRE(reg, HK_ON_TRAIN_START, &ctx);
  ctx.global_step = 49;
  HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &ctx);
  s = tr_gradient_monitor_get(reg, h);
  assert_int_equal(s->n_tensors, 1);
  assert_int_equal(g_hist_calls, 1);
  assert_non_null(s->histogram);
  assert_int_equal(s->histogram->num, 100);
  assert_true(s->histogram->min == 1 && s->histogram->max == 100);
  assert_true(s->histogram->edges[0] == 1 && s->histogram->edges[4] == 100 && s->histogram->edges[1] == 1 + 99.0 / 4);
  assert_int_equal(s->histogram->counts[0], 25); /* 1..25.75 */
  assert_int_equal(s->histogram->counts[3], 25); /* 75.25..100, 100 included */
  assert_true(s->histogram->sum == 5050);
  assert_int_equal(hk_metric_get(&ctx, "grad_2.0_norm/layer.weight", &v), 0);
  assert_true(hk_metric_get(&ctx, "grad_2.0_norm_total", &v) && fabs(v - sqrt(sq)) < 1e-9);
  hk_destroy(reg);
  hk_ctx_free(&ctx);

  /* a filter that selects nothing fails at on_train_start, naming it */
  reg = hk_create(NULL);
  memset(&ctx, 0, sizeof ctx);
  ctx.grads = g;
  ctx.n_tensors = 2;
  assert_int_equal(tr_add_factories(reg), HK_OK);
  assert_int_equal(hk_spec_apply(reg, "gradient_monitor(param_filter=conv)"), HK_OK);
  assert_int_equal(HK_FIRE(reg, HK_ON_TRAIN_START, &ctx), HK_FAIL);
  assert_non_null(strstr(ctx.hook_failure, "param_filter 'conv' selects no tensor"));
  hk_destroy(reg);
  hk_ctx_free(&ctx);
}

/* issue 28 item 20: with nan_guard and gradient_monitor both registered the gradients are read once a
   step. nan_guard (order -10) asks hk_grad_norm first; the trainer's pass behind it keeps each tensor's
   sum of squares, and gradient_monitor (order 0) publishes those. Shown by a hook between them (order
   -5) that doubles the gradients without saying so (no hk_grads_changed) and one after them (order 5)
   that halves them back: gradient_monitor's norms are those of the one pass before the doubling. A
   second pass of its own would see them doubled. In a loop of your own (no shared pass) gradient_monitor
   makes the pass and leaves hk_grad_norm its value, so a reader after it does not pass again. */
typedef struct gp_rec { int steps, wrong; double norm_seen, w_seen; } gp_rec;
static void scale_grads(hk_ctx *ctx, float k) {
  int j;
  size_t i;
  for (j = 0; j < ctx->n_tensors; j++)
    for (i = 0; i < ctx->grads[j].count; i++) ((float *)ctx->grads[j].data)[i] *= k;
}
static hk_signal gp_double(hk_ctx *ctx, void *user) {
  gp_rec *r = (gp_rec *)user;
  size_t i;
  double w = 0;
  if (!hk_grad_norm_known(ctx)) r->wrong++; /* nan_guard asked already */
  r->norm_seen = hk_grad_norm(ctx);
  for (i = 0; i < ctx->grads[0].count; i++) w += (double)ctx->grads[0].data[i] * ctx->grads[0].data[i];
  r->w_seen = sqrt(w);
  scale_grads(ctx, 2.0f);
  return HK_CONTINUE;
}
static hk_signal gp_halve(hk_ctx *ctx, void *user) {
  gp_rec *r = (gp_rec *)user;
  double v;
  r->steps++;
  if (!hk_metric_get(ctx, "grad_2.0_norm_total", &v) || v != r->norm_seen) r->wrong++; /* the shared pass, bit for bit */
  if (!hk_metric_get(ctx, "grad_2.0_norm/w", &v) || fabs(v - r->w_seen) > 1e-12 * (1 + v)) r->wrong++;
  scale_grads(ctx, 0.5f);
  return HK_CONTINUE;
}
static hk_signal gp_after_monitor(hk_ctx *ctx, void *user) {
  gp_rec *r = (gp_rec *)user;
  double v;
  r->steps++;
  if (!hk_grad_norm_known(ctx)) r->wrong++; /* gradient_monitor's pass gave it */
  if (!hk_metric_get(ctx, "grad_2.0_norm_total", &v) || v != hk_grad_norm(ctx)) r->wrong++;
  return HK_CONTINUE;
}
static void test_grad_pass_shared(void **state) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(2);
  gp_rec r;
  (void)state;
  memset(&r, 0, sizeof r);
  lin_init(&m, &t, TR_OPTIM_ADAMW, 0.01);
  assert_int_equal(hk_spec_apply(t.reg, "nan_guard; gradient_monitor(log_frequency=1, vanishing_threshold=-1)"), HK_OK);
  hk_on(t.reg, HK_ON_BEFORE_OPTIMIZER_STEP, gp_double, &r, &(hk_opts){ .name = "double", .order = -5 }, NULL);
  hk_on(t.reg, HK_ON_BEFORE_OPTIMIZER_STEP, gp_halve, &r, &(hk_opts){ .name = "halve", .order = 5 }, NULL);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(r.steps, 2 * NBATCH);
  assert_int_equal(r.wrong, 0);
  lin_free(&m, &t);
  { /* a loop of your own: gradient_monitor alone passes, and hk_grad_norm has its value after it */
    hk_registry *reg = hk_create(NULL);
    hk_ctx ctx;
    float a[3] = { 1, 2, 3 }, b[1] = { 4 };
    hk_tensor g[2] = { { "w", a, 3, 0 }, { "b", b, 1, 0 } };
    memset(&r, 0, sizeof r);
    memset(&ctx, 0, sizeof ctx);
    ctx.grads = g;
    ctx.n_tensors = 2;
    assert_int_equal(tr_add_factories(reg), HK_OK);
    assert_int_equal(hk_spec_apply(reg, "gradient_monitor(log_frequency=1)"), HK_OK);
    hk_on(reg, HK_ON_BEFORE_OPTIMIZER_STEP, gp_after_monitor, &r, &(hk_opts){ .name = "after", .order = 5 }, NULL);
    assert_int_equal(HK_FIRE(reg, HK_ON_TRAIN_START, &ctx), HK_CONTINUE);
    assert_int_equal(HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &ctx), HK_CONTINUE);
    assert_true(hk_grad_norm(&ctx) == sqrt(30.0));
    assert_int_equal(r.steps, 1);
    assert_int_equal(r.wrong, 0);
    hk_destroy(reg);
    hk_ctx_free(&ctx);
  }
}

/* issue 28 item 14: views that are not complete (llm.c allocates its gradients in the first backward).
   Before: one column "grad_2.0_norm/" (an empty name) and no word. Now (issue 36 item 5: where it first
   reads them, not at on_train_start) the run fails at the first due step naming the view's index, the
   event and what to set, in whole sentences, gradient_monitor's name once: in a loop of your own through
   tr_run_start, and for each way a view can be incomplete (no name, no data, no elements, a name twice). */
static void gm_views_case(hk_tensor *g, int n, const char *want) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  const char *err;
  double v;
  memset(&ctx, 0, sizeof ctx);
  ctx.grads = g;
  ctx.n_tensors = n;
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .log = out, .no_signals = 1 }), TR_OK);
  assert_int_equal(hk_spec_apply(reg, "gradient_monitor(log_frequency=1)"), HK_OK);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK); /* nothing read yet */
  HK_FIRE_FLOW(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &ctx, &flow);
  assert_true(HK_FLOW_HAS(&flow, HK_FLOW_FAIL));
  ctx.global_step++;
  assert_true(tr_run_batch_end(reg, &ctx, &flow) & TR_RUN_STOP);
  assert_int_not_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  err = tr_run_error(reg);
  if (!strstr(err, want)) fail_msg("error: %s\nwant: %s", err, want);
  assert_non_null(strstr(err, "callback 'gradient_monitor' failed in on_before_optimizer_step: ctx->grads["));
  assert_null(strstr(strstr(err, "gradient_monitor") + 1, "gradient_monitor")); /* its name once */
  assert_int_equal(hk_metric_get(&ctx, "grad_2.0_norm/", &v), 0);
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  fclose(out);
  free(buf);
}
static void test_gradient_monitor_views_checked(void **state) {
  float a[3] = { 1, 2, 3 }, b[1] = { 4 };
  hk_tensor g[2];
  (void)state;
  memset(g, 0, sizeof g); /* the llm.c shape: views set up after the run started */
  gm_views_case(g, 1, "ctx->grads[0] has no name (NULL) at on_before_optimizer_step, where it is first read: give every "
                      "view a name of its own, its data and its count by then");
  g[0].name = "";
  gm_views_case(g, 1, "ctx->grads[0] has no name (\"\")");
  g[0].name = "wte"; g[0].data = a; g[0].count = 3;
  g[1].name = "wpe"; g[1].count = 1;
  gm_views_case(g, 2, "ctx->grads[1] ('wpe') has no data (NULL) at on_before_optimizer_step, where it is first read: point "
                      "each view at its buffer by then (llm.c's gradients: after the first backward)");
  g[1].data = b; g[1].count = 0;
  gm_views_case(g, 2, "ctx->grads[1] ('wpe') has count 0 at on_before_optimizer_step, where it is first read: give every "
                      "view its element count by then");
  g[1].count = 1; g[1].name = "wte";
  gm_views_case(g, 2, "ctx->grads[0] and ctx->grads[1] are both named 'wte'");
  { /* complete views: it runs */
    hk_registry *reg = hk_create(NULL);
    hk_ctx ctx;
    double v;
    g[1].name = "wpe";
    memset(&ctx, 0, sizeof ctx);
    ctx.grads = g;
    ctx.n_tensors = 2;
    assert_int_equal(tr_add_factories(reg), HK_OK);
    assert_int_equal(hk_spec_apply(reg, "gradient_monitor(log_frequency=1)"), HK_OK);
    assert_int_equal(HK_FIRE(reg, HK_ON_TRAIN_START, &ctx), HK_CONTINUE);
    assert_int_equal(HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &ctx), HK_CONTINUE);
    assert_true(hk_metric_get(&ctx, "grad_2.0_norm/wpe", &v) && v == 4);
    g[1].data = NULL; /* taken away after the start: said at the step, not a crash */
    assert_int_equal(HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &ctx), HK_FAIL);
    assert_non_null(strstr(ctx.hook_failure, "ctx->grads[1] ('wpe') has no data (NULL) at on_before_optimizer_step, where it is first read"));
    hk_destroy(reg);
    hk_ctx_free(&ctx);
  }
}

/* =================================================================================================
   ema
   ================================================================================================= */
typedef struct ema_rec { float avg[4]; int64_t n; double decay; int bad_val; lin *m; } ema_rec;
static hk_signal rec_ema_step(hk_ctx *ctx, void *user) { /* the expected average, computed alongside */
  ema_rec *r = (ema_rec *)user;
  int i;
  if (ctx->global_step < 3) return HK_CONTINUE; /* start_step 3 */
  for (i = 0; i < 4; i++) r->avg[i] = r->n == 0 ? r->m->p[i] : (float)((double)r->avg[i] + (1 - r->decay) * ((double)r->m->p[i] - (double)r->avg[i]));
  r->n++;
  return HK_CONTINUE;
}
static hk_signal rec_ema_val_end(hk_ctx *ctx, void *user) {
  ema_rec *r = (ema_rec *)user;
  (void)ctx;
  if (r->n > 0 && memcmp(r->m->val_p, r->avg, sizeof r->avg)) r->bad_val++;
  return HK_CONTINUE;
}
static hk_signal fail_hook(hk_ctx *ctx, void *user) { (void)user; return hk_fail(ctx, "on purpose"); }
static void test_ema(void **state) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(3);
  ema_rec r;
  hk_handle h;
  const tr_ema_state *s;
  float trained[4];
  (void)state;
  lin_init(&m, &t, TR_OPTIM_SGD, 0.05);
  memset(&r, 0, sizeof r);
  r.m = &m;
  r.decay = 0.75;
  assert_int_equal(tr_ema(t.reg, &(tr_ema_desc){ .decay = 0.75, .start_step = 3 }, &h), TR_OK);
  hk_on(t.reg, HK_ON_AFTER_OPTIMIZER_STEP, rec_ema_step, &r, &(hk_opts){ .name = "rec_step" }, NULL);
  hk_on(t.reg, HK_ON_VALIDATION_END, rec_ema_val_end, &r, &(hk_opts){ .name = "rec_val" }, NULL);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  s = tr_ema_get(t.reg, h);
  assert_int_equal(s->n_averaged, 10); /* steps 3..12 */
  assert_int_equal(r.n, 10);
  assert_memory_equal(s->average, r.avg, sizeof r.avg);
  assert_int_equal(r.bad_val, 0); /* every validation saw the average */
  assert_int_equal(s->swapped, 0);
  assert_true(memcmp(m.p, r.avg, sizeof r.avg) != 0); /* and the trained weights came back */
  memcpy(trained, m.p, sizeof trained);
  assert_int_equal(tr_test(&t, &g_val, 0, NULL), TR_OK); /* test runs on the average too */
  assert_memory_equal(m.val_p, r.avg, sizeof r.avg);
  assert_memory_equal(m.p, trained, sizeof trained);
  /* a test that fails inside its loop: teardown swaps the trained weights back */
  {
    hk_handle fail;
    assert_int_equal(hk_on(t.reg, HK_ON_TEST_BATCH_END, fail_hook, NULL, &(hk_opts){ .name = "fail" }, &fail), HK_OK);
    assert_int_equal(tr_test(&t, &g_val, 0, NULL), TR_ERR_HOOK);
    assert_memory_equal(m.p, trained, sizeof trained);
    assert_int_equal(tr_ema_get(t.reg, h)->swapped, 0);
  }
  lin_free(&m, &t);

  /* SWA from epoch 1: the mean of the weights at the ends of epochs 1 and 2; copied at the end */
  lin_init(&m, &t, TR_OPTIM_SGD, 0.05);
  assert_int_equal(hk_spec_apply(t.reg, "ema(swa_epoch_start=1, copy_at_end=true)"), HK_OK);
  h = hk_find(t.reg, "ema");
  {
    float e1[4], e2[4];
    int i;
    c = lin_cfg(2);
    assert_int_equal(tr_fit(&t, &c), TR_OK);
    memcpy(e1, m.p, sizeof e1); /* copy_at_end with one average = the weights themselves */
    assert_int_equal(tr_ema_get(t.reg, h)->n_averaged, 1);
    c = lin_cfg(3);
    assert_int_equal(tr_fit(&t, &c), TR_OK);
    assert_int_equal(tr_ema_get(t.reg, h)->n_averaged, 2);
    for (i = 0; i < 4; i++) e2[i] = tr_ema_get(t.reg, h)->average[i];
    assert_memory_equal(m.p, e2, sizeof e2);
    (void)e1;
  }
  lin_free(&m, &t);
}

/* =================================================================================================
   lr_finder
   ================================================================================================= */
static float g_start_p[4];
static int g_restored;
static hk_signal check_restored(hk_ctx *ctx, void *user) {
  tr_trainer *t = (tr_trainer *)ctx->trainer;
  (void)user;
  g_restored = !memcmp(t->model.params, g_start_p, sizeof g_start_p) && t->global_step == 0;
  return HK_CONTINUE;
}
static void test_lr_finder(void **state) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(2);
  hk_handle h;
  const tr_lr_finder_state *s;
  float with[4];
  double lr;
  char path[] = "/tmp/test_lr_finder.XXXXXX", line[128];
  FILE *f;
  int lines = 0, fd;
  (void)state;
  fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  lin_init(&m, &t, TR_OPTIM_ADAMW, 1e-3);
  memcpy(g_start_p, m.p, sizeof g_start_p);
  assert_int_equal(tr_lr_finder(t.reg, &(tr_lr_finder_desc){ .min_lr = 1e-5, .max_lr = 100, .num_training_steps = 60, .curve_path = path }, &h), TR_OK);
  hk_on(t.reg, HK_ON_FIT_START, check_restored, NULL, &(hk_opts){ .name = "check", .order = 10 }, NULL);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  s = tr_lr_finder_get(t.reg, h);
  assert_int_equal(g_restored, 1); /* the sweep left parameters and counters as they were */
  assert_int_equal(s->done, 1);
  assert_true(s->n >= 13 && s->n <= 60);
  assert_true(s->suggestion_index >= 10 && s->suggestion_index < s->n - 1);
  assert_true(s->suggestion == s->lrs[s->suggestion_index]);
  assert_true(s->suggestion > 1e-5 && s->suggestion < 100);
  assert_true(t.optim.lr == s->suggestion);
  assert_true(s->lrs[0] == 1e-5);
  assert_true(fabs(s->lrs[1] / s->lrs[0] - pow(1e7, 1.0 / 59)) < 1e-9); /* exponential steps */
  /* steepest descent: no finite interior slope is steeper */
  assert_true(s->losses[s->suggestion_index + 1] < s->losses[s->suggestion_index - 1]);
  assert_non_null(strstr(lin_logtext(&m), "lr_finder: suggested learning rate"));
  assert_non_null(f = fopen(path, "r"));
  while (fgets(line, sizeof line, f)) lines++;
  fclose(f);
  unlink(path);
  assert_int_equal(lines, s->n + 1);
  lr = s->suggestion;
  memcpy(with, m.p, sizeof with);
  lin_free(&m, &t);
  /* the same fit without the finder, at the suggested lr: bit for bit the same (optimizer state restored) */
  lin_init(&m, &t, TR_OPTIM_ADAMW, lr);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_memory_equal(m.p, with, sizeof with);
  lin_free(&m, &t);
  /* too few points: no suggestion, lr unchanged */
  lin_init(&m, &t, TR_OPTIM_SGD, 0.01);
  assert_int_equal(hk_spec_apply(t.reg, "lr_finder(num_training_steps=8, verbose=true)"), HK_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  s = tr_lr_finder_get(t.reg, hk_find(t.reg, "lr_finder"));
  assert_true(s->suggestion != s->suggestion);
  assert_true(t.optim.lr == 0.01);
  assert_non_null(strstr(lin_logtext(&m), "no suggestion: too few points (8"));
  lin_free(&m, &t);
}

/* =================================================================================================
   model_summary
   ================================================================================================= */
static void test_model_summary(void **state) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(1);
  hk_handle h;
  const char *text;
  (void)state;
  lin_init(&m, &t, TR_OPTIM_SGD, 0.01);
  assert_int_equal(tr_model_summary(t.reg, &(tr_model_summary_desc){ 0 }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  text = lin_logtext(&m);
  assert_non_null(strstr(text, "  | Name | Params   | Share  | Device\n"));
  assert_non_null(strstr(text, "0 | w    | 3        |  75.0% | cpu\n"));
  assert_non_null(strstr(text, "1 | b    | 1        |  25.0% | cpu\n"));
  assert_non_null(strstr(text, "4         Total params (2 tensors)\n0.000     Total estimated model params size (MB)"));
  assert_int_equal(tr_model_summary_get(t.reg, h)->total_params, 4);
  lin_free(&m, &t);
  /* Lightning's count format, and a row limit */
  {
    hk_registry *reg = hk_create(NULL);
    hk_ctx ctx;
    hk_tensor v[3] = { { "emb", NULL, 1234567, 0 }, { "head", NULL, 12345, 1 }, { "bias", NULL, 5, 0 } };
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    tr_trainer fake;
    memset(&fake, 0, sizeof fake);
    fake.reg = reg;
    memset(&ctx, 0, sizeof ctx);
    ctx.params = v;
    ctx.n_tensors = 3;
    assert_int_equal(tr_model_summary(fake.reg, &(tr_model_summary_desc){ .max_rows = 2, .out = out }, NULL), TR_OK);
    HK_FIRE(reg, HK_ON_FIT_START, &ctx);
    fclose(out);
    assert_non_null(strstr(buf, "0 | emb  | 1.2 M    |  99.0% | cpu\n"));
    assert_non_null(strstr(buf, "1 | head | 12.3 K   |   1.0% | gpu\n"));
    assert_non_null(strstr(buf, "(1 more tensors) 5 parameters"));
    assert_non_null(strstr(buf, "1.2 M     Total params (3 tensors)"));
    free(buf);
    hk_destroy(reg);
  }
}

/* =================================================================================================
   profiler and throughput_monitor
   ================================================================================================= */
static int g_slow_ns;             /* the slow hook's busy wait */
static hk_signal slow_hook(hk_ctx *ctx, void *u) {
  double t0 = hk_clock();
  (void)ctx; (void)u;
  while (hk_clock() - t0 < 1e-9 * g_slow_ns) {}
  return HK_CONTINUE;
}
typedef struct seen_rec { int n; double v[8]; const char *names[8]; int has[8]; } seen_rec;
/* on_log, after the profiler (a monitor with a higher order): what the record carries */
static hk_signal grab_record(hk_ctx *ctx, void *u) {
  seen_rec *s = (seen_rec *)u;
  tr_log_record *r = tr_log_current(ctx);
  int k;
  if (!r || strcmp(r->stage, "train")) return HK_CONTINUE;
  s->n++;
  for (k = 0; k < 8 && s->names[k]; k++) s->has[k] += tr_log_get(r, s->names[k], &s->v[k]);
  return HK_CONTINUE;
}
static int count_overlapping(const char *text, const char *what) {
  int n = 0;
  for (; (text = strstr(text, what)) != NULL; text++) n++;
  return n;
}

/* tr_fit: every phase, event and hook timed; the table at teardown; records; off again when removed */
static void test_profiler_fit(void **state) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(2);
  hk_handle h;
  const tr_profiler_state *p;
  const char *text;
  hk_prof ev;
  seen_rec seen;
  (void)state;
  memset(&seen, 0, sizeof seen);
  seen.names[0] = "profiler/step_ms";
  seen.names[1] = "profiler/forward_ms";
  seen.names[2] = "profiler/on_train_batch_end_ms";
  seen.names[3] = "profiler/data_ms";
  lin_init(&m, &t, TR_OPTIM_SGD, 0.01);
  c.log_every_n_steps = 2;
  c.gradient_clip_val = 100;
  assert_false(hk_profiling(t.reg));
  assert_int_equal(tr_profiler(t.reg, &(tr_profiler_desc){ 0 }, &h), TR_OK);
  assert_true(hk_profiling(t.reg));
  assert_int_equal(hk_on(t.reg, HK_ON_LOG, grab_record, &seen, &(hk_opts){ .name = "grab", .monitor = 1, .order = 1 << 20 }, NULL), HK_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  p = tr_profiler_get(t.reg, h);
  assert_non_null(p);
  assert_int_equal(p->steps, 2 * NBATCH);
  assert_int_equal(p->phase_calls[TR_PHASE_DATA], 2 * NBATCH);
  assert_int_equal(p->phase_calls[TR_PHASE_FORWARD], 2 * NBATCH);
  assert_int_equal(p->phase_calls[TR_PHASE_BACKWARD], 2 * 2 * NBATCH);  /* backward, then the window's gradient sum */
  assert_int_equal(p->phase_calls[TR_PHASE_OPTIMIZER], 3 * 2 * NBATCH); /* zero_grad, clipping, the update */
  assert_true(p->step_time > 0 && p->run_time >= p->step_time);
  assert_int_equal(hk_profile_event(t.reg, HK_ON_TRAIN_BATCH_END, &ev), 0);
  assert_int_equal(ev.calls, 2 * NBATCH);
  assert_string_equal(ev.name, "on_train_batch_end");
  assert_int_equal(hk_profile_event(t.reg, HK_SETUP, &ev), 0);
  assert_int_equal(ev.calls, 1);
  assert_int_equal(hk_profile_event(t.reg, HK_ON_TRAIN_START, &ev), 0);
  assert_int_equal(ev.calls, 0); /* no hook there: never dispatched, never timed */
  /* records: every second step, with the interval's means */
  assert_int_equal(seen.n, NBATCH);
  assert_int_equal(seen.has[0], NBATCH);
  assert_int_equal(seen.has[1], NBATCH);
  assert_int_equal(seen.has[2], NBATCH);
  assert_int_equal(seen.has[3], NBATCH);
  assert_true(seen.v[0] > 0 && seen.v[1] >= 0);
  text = lin_logtext(&m);
  assert_int_equal(count_overlapping(text, "profiler: fit, "), 1);
  assert_non_null(strstr(text, "kind       name"));
  assert_non_null(strstr(text, "phase      data "));
  assert_non_null(strstr(text, "phase      forward "));
  assert_non_null(strstr(text, "phase      backward "));
  assert_non_null(strstr(text, "phase      optimizer "));
  assert_non_null(strstr(text, "event      on_train_batch_end "));
  assert_non_null(strstr(text, "  hook     profiler "));
  assert_non_null(strstr(text, "  hook     grab "));
  assert_null(strstr(text, "warning")); /* nothing is slow here */
  /* removed: profiling is off and the fast loop is back */
  assert_int_equal(hk_off(t.reg, h), HK_OK);
  assert_false(hk_profiling(t.reg));
  assert_non_null(t.reg->hk__fast[HK_ON_LOG]);
  lin_free(&m, &t);
}

/* a slow hook: one warning, once, naming it; slow_fraction < 0: none */
static void test_profiler_slow_hook(void **state) {
  int round;
  (void)state;
  g_slow_ns = 5000000; /* 5 ms a call: far above half of this model's step, also under valgrind (a busy wait: wall time) */
  for (round = 0; round < 2; round++) {
    lin m;
    tr_trainer t;
    tr_config c = lin_cfg(3);
    hk_handle h;
    const char *text;
    lin_init(&m, &t, TR_OPTIM_SGD, 0.01);
    c.log_every_n_steps = 2;
    assert_int_equal(tr_profiler(t.reg, &(tr_profiler_desc){ .slow_fraction = round ? -1 : 0, .table = TR_NO }, &h), TR_OK);
    assert_int_equal(hk_on(t.reg, HK_ON_AFTER_BACKWARD, slow_hook, NULL, &(hk_opts){ .name = "slowpoke" }, NULL), HK_OK);
    assert_int_equal(tr_fit(&t, &c), TR_OK);
    text = lin_logtext(&m);
    assert_int_equal(count_overlapping(text, "profiler: warning: hook 'slowpoke' takes "), round ? 0 : 1);
    if (!round) assert_non_null(strstr(text, "per call at on_after_backward, "));
    assert_int_equal(tr_profiler_get(t.reg, h)->warnings, round ? 0 : 1);
    assert_null(strstr(text, "profiler: fit")); /* table=false */
    lin_free(&m, &t);
  }
}

/* a loop of your own that fails: the table still comes at teardown (where did the time go) */
static hk_signal fail_at_3(hk_ctx *ctx, void *u) {
  (void)u;
  return ctx->global_step == 3 ? hk_fail(ctx, "boom at step 3") : HK_CONTINUE;
}
static void test_profiler_own_loop_failing(void **state) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  const tr_profiler_state *p;
  unsigned next = 0;
  (void)state;
  memset(&ctx, 0, sizeof ctx);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = 10, .log = out, .no_signals = 1 }), TR_OK);
  assert_int_equal(hk_spec_apply(reg, "profiler(slow_fraction=2)"), HK_OK);
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_BATCH_END, fail_at_3, NULL, NULL, NULL), HK_OK);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  while (!(next & TR_RUN_STOP) && ctx.global_step < 10) {
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, &ctx, &flow);
    HK_FIRE_FLOW(reg, HK_ON_BEFORE_BACKWARD, &ctx, &flow);
    HK_FIRE_FLOW(reg, HK_ON_AFTER_BACKWARD, &ctx, &flow);
    HK_FIRE_FLOW(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &ctx, &flow);
    ctx.global_step++;
    HK_FIRE_FLOW(reg, HK_ON_AFTER_OPTIMIZER_STEP, &ctx, &flow);
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);
    next = tr_run_batch_end(reg, &ctx, &flow);
    hk_flow_clear(&flow, HK_FLOW_BATCH_SIGNALS);
  }
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_ERR_HOOK);
  fflush(out);
  p = tr_profiler_get(reg, hk_spec_find(reg, "profiler", 0));
  assert_non_null(p);
  assert_int_equal(p->steps, 3);
  assert_int_equal(p->phase_calls[TR_PHASE_FORWARD], 3);
  assert_int_equal(p->phase_calls[TR_PHASE_BACKWARD], 6);
  assert_int_equal(p->phase_calls[TR_PHASE_OPTIMIZER], 3);
  assert_non_null(strstr(buf, "profiler: fit, "));
  assert_non_null(strstr(buf, "event      on_train_batch_end "));
  assert_non_null(strstr(buf, "event      setup "));
  assert_non_null(strstr(buf, "  hook     hook#"));
  assert_int_equal(tr_profiler_print(reg, hk_spec_find(reg, "profiler", 0), out), 0);
  assert_int_equal(tr_profiler_print(reg, 12345, out), -1);
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  fclose(out);
  free(buf);
}

/* throughput_monitor in a loop of your own, on a clock it is given: exact rates, percentiles, MFU,
   tokens (per sample and from a metric), validation left out, several ranks */
static double g_fake_now;
static double fake_clock(void *u) { (void)u; return g_fake_now; }
static void tp_run(int world, const char *tokens_metric, seen_rec *seen, tr_throughput_monitor_state *out) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  hk_handle h;
  int i;
  memset(&ctx, 0, sizeof ctx);
  g_fake_now = 100;
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = 20, .log_every_n_steps = 10, .no_signals = 1 }), TR_OK);
  assert_int_equal(tr_throughput_monitor(reg, &(tr_throughput_monitor_desc){ .window = 10, .tokens_per_sample = 8,
                                           .tokens_metric = tokens_metric, .flops_per_sample = 100, .peak_flops = 1e5,
                                           .clock = fake_clock }, &h), TR_OK);
  assert_int_equal(hk_on(reg, HK_ON_LOG, grab_record, seen, &(hk_opts){ .name = "grab", .monitor = 1, .order = 1 << 20 }, NULL), HK_OK);
  ctx.world_size = world;
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  for (i = 1; i <= 20; i++) {
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, &ctx, &flow);
    g_fake_now += i <= 10 ? 0.001 * (11 - i) : 0.001 * (i - 10); /* steps 10, 9, .. 1 ms, then 1 .. 10 ms */
    ctx.global_step++;
    ctx.samples_seen += 4;
    if (tokens_metric) hk_metric_set(&ctx, tokens_metric, 30);
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);
    tr_run_batch_end(reg, &ctx, &flow);
    if (i == 15) { /* a validation of 5 s: not training time */
      HK_FIRE_FLOW(reg, HK_ON_VALIDATION_START, &ctx, &flow);
      g_fake_now += 5;
      HK_FIRE_FLOW(reg, HK_ON_VALIDATION_END, &ctx, &flow);
    }
  }
  *out = *tr_throughput_monitor_get(reg, h);
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  hk_ctx_free(&ctx);
  hk_destroy(reg);
}
static void test_throughput_monitor(void **state) {
  int world;
  (void)state;
  for (world = 1; world <= 4; world += 3) {
    seen_rec seen;
    tr_throughput_monitor_state s;
    memset(&seen, 0, sizeof seen);
    seen.names[0] = "throughput/samples_per_sec";
    seen.names[1] = "throughput/tokens_per_sec";
    seen.names[2] = "throughput/step_ms_p50";
    seen.names[3] = "throughput/step_ms_p99";
    seen.names[4] = "throughput/mfu";
    seen.names[5] = "throughput/device/samples_per_sec";
    seen.names[6] = "throughput/samples";
    tp_run(world, NULL, &seen, &s);
    /* the last window: steps 11..20 took 1..10 ms, 55 ms for 40 samples */
    assert_int_equal(s.steps, 20);
    assert_int_equal(s.n, 10);
    assert_true(fabs(s.samples_per_sec - world * 40 / 0.055) < 1e-6);
    assert_true(fabs(s.device_samples_per_sec - 40 / 0.055) < 1e-6);
    assert_true(fabs(s.batches_per_sec - world * 10 / 0.055) < 1e-6);
    assert_true(fabs(s.tokens_per_sec - world * 320 / 0.055) < 1e-6);
    assert_true(fabs(s.flops_per_sec - world * 4000 / 0.055) < 1e-6);
    assert_true(fabs(s.mfu - 4000 / 0.055 / 1e5) < 1e-9); /* per device: the same for any world size */
    assert_true(fabs(s.step_ms_p50 - 5) < 1e-6 && fabs(s.step_ms_p90 - 9) < 1e-6 && fabs(s.step_ms_p99 - 10) < 1e-6);
    assert_true(fabs(s.samples - world * 80) < 1e-9 && fabs(s.tokens - world * 640) < 1e-9);
    /* the records (steps 10 and 20) carry them */
    assert_int_equal(seen.n, 2);
    assert_int_equal(seen.has[0], 2);
    assert_int_equal(seen.has[1], 2);
    assert_int_equal(seen.has[4], 2);
    assert_int_equal(seen.has[5], world > 1 ? 2 : 0);
    assert_true(fabs(seen.v[0] - s.samples_per_sec) < 1e-6);
    assert_true(fabs(seen.v[2] - 5) < 1e-6);
    assert_true(fabs(seen.v[6] - world * 80) < 1e-9);
  }
  { /* tokens from a metric the loop sets: 30 a batch */
    seen_rec seen;
    tr_throughput_monitor_state s;
    memset(&seen, 0, sizeof seen);
    tp_run(1, "batch/tokens", &seen, &s);
    assert_true(fabs(s.tokens_per_sec - 300 / 0.055) < 1e-6);
    assert_true(fabs(s.tokens - 600) < 1e-9);
  }
}

/* in tr_fit, under the real clock; a loop that does not count samples is told so */
static void test_throughput_monitor_fit(void **state) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(2);
  hk_handle h;
  const tr_throughput_monitor_state *s;
  double v;
  (void)state;
  lin_init(&m, &t, TR_OPTIM_SGD, 0.01);
  g_train.batch_size = BS;
  c.log_every_n_steps = 2;
  assert_int_equal(hk_spec_apply(t.reg, "throughput_monitor(window=4, tokens_per_sample=16)"), HK_OK);
  h = hk_spec_find(t.reg, "throughput_monitor", 0);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  s = tr_throughput_monitor_get(t.reg, h);
  assert_int_equal(s->steps, 2 * NBATCH);
  assert_int_equal(s->n, 4);
  assert_true(s->samples_per_sec > 0 && fabs(s->tokens_per_sec - 16 * s->samples_per_sec) < 1e-6 * s->tokens_per_sec);
  assert_true(s->step_ms_p50 > 0 && s->step_ms_p50 <= s->step_ms_p90 && s->step_ms_p90 <= s->step_ms_p99);
  assert_true(isnan(s->mfu) && isnan(s->flops_per_sec));
  assert_true(fabs(s->samples - 2 * NS) < 1e-9);
  assert_true(hk_metric_get(&t.ctx, "throughput/samples_per_sec", &v) && v > 0);
  assert_null(strstr(lin_logtext(&m), "samples_seen did not move"));
  g_train.batch_size = 0;
  lin_free(&m, &t);
  { /* samples_seen never moves */
    hk_registry *reg = hk_create(NULL);
    hk_ctx ctx;
    hk_flow flow = { 0 };
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    int i;
    memset(&ctx, 0, sizeof ctx);
    assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .log_every_n_steps = 2, .log = out, .no_signals = 1 }), TR_OK);
    assert_int_equal(tr_throughput_monitor(reg, &(tr_throughput_monitor_desc){ 0 }, NULL), TR_OK);
    assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
    for (i = 0; i < 6; i++) {
      ctx.global_step++;
      HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);
      tr_run_batch_end(reg, &ctx, &flow);
    }
    assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
    fflush(out);
    assert_int_equal(count_overlapping(buf, "throughput_monitor: ctx->samples_seen did not move in 2 steps"), 1);
    hk_ctx_free(&ctx);
    hk_destroy(reg);
    fclose(out);
    free(buf);
  }
}

/* issue 28 item 4: without tr_data.batch_size, samples_seen counts batches and throughput_monitor's rates
   per sample are per batch; tr_fit says so once per trainer, naming tr_data.batch_size, and only when
   throughput_monitor is registered and the size is missing */
static void test_throughput_monitor_batch_size_warning(void **state) {
  static const char *const said = "tr_data.batch_size is 0: samples_seen counts batches";
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(1);
  int round;
  (void)state;
  for (round = 0; round < 3; round++) { /* 0: registered, no size; 1: registered, size given; 2: no monitor */
    lin_init(&m, &t, TR_OPTIM_SGD, 0.01);
    g_train.batch_size = round == 1 ? BS : 0;
    if (round < 2) assert_int_equal(hk_spec_apply(t.reg, "throughput_monitor(window=4)"), HK_OK);
    assert_int_equal(tr_fit(&t, &c), TR_OK);
    c.max_epochs = 2;
    assert_int_equal(tr_fit(&t, &c), TR_OK); /* a second fit of the same trainer: not said again */
    c.max_epochs = 1;
    assert_int_equal(count_overlapping(lin_logtext(&m), said), round == 0 ? 1 : 0);
    if (round == 0) assert_int_equal(t.samples_seen, 2 * NBATCH); /* what it warns about: batches, not samples */
    g_train.batch_size = 0;
    lin_free(&m, &t);
  }
}

/* bad parameters: the constructors and the spec strings say what is wrong and what would be right */
static void test_profiler_throughput_bad_parameters(void **state) {
  hk_registry *reg = hk_create(NULL);
  (void)state;
  assert_int_equal(tr_add_factories(reg), HK_OK);
  assert_int_equal(tr_profiler(reg, &(tr_profiler_desc){ .slow_fraction = NAN }, NULL), TR_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(reg), "slow_fraction must be a finite number"));
  assert_int_equal(tr_profiler(reg, &(tr_profiler_desc){ .table = 7 }, NULL), TR_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(reg), "table and log_metrics take TR_YES, TR_NO"));
  assert_int_equal(hk_spec_apply(reg, "profiler(slow_fraction=0)"), HK_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(reg), "slow_fraction=0 would call every hook slow"));
  assert_int_equal(hk_spec_apply(reg, "profiler(table=maybe)"), HK_ERR_SPEC);
  assert_false(hk_profiling(reg)); /* nothing refused turned it on */
  assert_int_equal(hk_spec_apply(reg, "profiler"), HK_OK);
  assert_int_equal(hk_spec_apply(reg, "profiler"), HK_ERR_INVALID); /* one per registry */
  assert_non_null(strstr(hk_last_error(reg), "'profiler'"));
  assert_true(hk_profiling(reg));  /* the refused second one did not turn it off */
  assert_int_equal(tr_throughput_monitor(reg, &(tr_throughput_monitor_desc){ .window = 1 }, NULL), TR_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(reg), "window must be in 2..1000000 steps (0 = 100), got 1"));
  assert_int_equal(hk_spec_apply(reg, "throughput_monitor(window=0)"), HK_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(reg), "window must be in 2..1000000 steps, got 0"));
  assert_int_equal(hk_spec_apply(reg, "throughput_monitor(window=2000000)"), HK_ERR_INVALID);
  assert_int_equal(hk_spec_apply(reg, "throughput_monitor(tokens_per_sample=-1)"), HK_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(reg), "tokens_per_sample must be a finite number >= 0, got -1"));
  assert_int_equal(tr_throughput_monitor(reg, &(tr_throughput_monitor_desc){ .flops_per_sample = INFINITY }, NULL), TR_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(reg), "flops_per_sample must be a finite number >= 0"));
  assert_int_equal(hk_spec_apply(reg, "throughput_monitor(peak_flops=1e15)"), HK_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(reg), "peak_flops needs flops_per_sample"));
  assert_int_equal(hk_spec_apply(reg, "throughput_monitor(peak_flops=-5, flops_per_sample=1)"), HK_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(reg), "peak_flops must be a finite number >= 0"));
  assert_int_equal(hk_spec_apply(reg, "throughput_monitor(windw=5)"), HK_ERR_SPEC);
  assert_int_equal(hk_count(reg, HK_ON_TRAIN_BATCH_END), 1); /* only the profiler */
  hk_destroy(reg);
}

/* =================================================================================================
   accumulation_scheduler
   ================================================================================================= */
static void test_accumulation_scheduler(void **state) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(4);
  hk_handle h;
  (void)state;
  lin_init(&m, &t, TR_OPTIM_SGD, 0.05);
  assert_int_equal(tr_accumulation_scheduler(t.reg, &(tr_accumulation_scheduler_desc){ .scheduling = "{1: 4, 3: 2}" }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(t.global_step, 4 + 1 + 1 + 2); /* epoch 0: 1 (missing key), 1-2: 4, 3: 2 */
  assert_int_equal(m.backwards, 16);
  assert_int_equal(tr_accumulation_scheduler_get(t.reg, h)->factor, 2);
  assert_int_equal(tr_accumulation_scheduler_get(t.reg, h)->n, 2);
  /* with the fit's own accumulation set: refused at on_fit_start, as Lightning */
  c.accumulate_grad_batches = 2;
  c.max_epochs = 6;
  assert_int_equal(tr_fit(&t, &c), TR_ERR_HOOK);
  assert_non_null(strstr(tr_error(&t), "accumulate_grad_batches is 2"));
  /* the last window of an epoch steps when short: factor 3 over 4 batches = 2 steps */
  lin_free(&m, &t);
  lin_init(&m, &t, TR_OPTIM_SGD, 0.05);
  c = lin_cfg(1);
  assert_int_equal(hk_spec_apply(t.reg, "accumulation_scheduler(scheduling=\"0:3\")"), HK_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(t.global_step, 2);
  assert_int_equal(tr_set_accumulation(&t, 2), TR_ERR_INVALID); /* not outside a fit */
  lin_free(&m, &t);
}

/* The scheduling string's grammar is strict (issue 18): a missing '}' or ',' is refused with a message
   that names the problem and the valid form, not read as something else. */
static void test_accumulation_scheduler_grammar(void **state) {
  static const struct { const char *text, *needle; } bad[] = {
    { "{0: 2", "the closing '}' is missing" },
    { "{0:2 1:3}", "a ',' is missing before position 5" },
    { "0:2 1:3", "a ',' is missing before position 4" },
    { "{0: 2}}", "'}' at position 6 after the closing '}'" },
    { "0: 2}", "'}' at position 4 where ',' was expected" },
    { "{}", "'}' at position 1 where an epoch was expected" },
    { "{0: 2,,}", "',' at position 6 where an epoch was expected" },
    { "{0: }", "'}' at position 4 where a factor was expected" },
    { "{0: 2, 3:", "it ends where a factor was expected" },
    { "{0: 2.5}", "'.' at position 5 where ',' or '}' was expected" },
    { "{0: +2}", "'+' at position 4 where a factor was expected" },
    { "{99999999999999999999: 2}", "is too large" },
    { "{2199023255553: 2}", "epoch 2199023255553 is too large" },
  };
  static const struct { const char *text; int n, last; } good[] = {
    { "{0: 2}", 1, 2 }, { "{0: 2,}", 1, 2 }, { " { 0 : 2 , 3 : 4 } ", 2, 4 }, { "0:2, 3:4", 2, 4 }, { "{0:2,\t5:1}", 2, 1 },
  };
  lin m;
  tr_trainer t;
  size_t i;
  char spec[200];
  (void)state;
  lin_init(&m, &t, TR_OPTIM_SGD, 0.05);
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(spec, sizeof spec, "accumulation_scheduler(scheduling=\"%s\")", bad[i].text);
    expect_bad_spec(&t, spec, bad[i].needle);
    expect_bad_spec(&t, spec, "valid: a schedule like \"{0: 4, 5: 2}\"");
    expect_bad(&t, tr_accumulation_scheduler(t.reg, &(tr_accumulation_scheduler_desc){ .scheduling = bad[i].text }, NULL), bad[i].needle);
  }
  for (i = 0; i < sizeof good / sizeof good[0]; i++) {
    hk_handle h;
    const tr_accumulation_scheduler_state *st;
    assert_int_equal(tr_accumulation_scheduler(t.reg, &(tr_accumulation_scheduler_desc){ .scheduling = good[i].text }, &h), TR_OK);
    st = tr_accumulation_scheduler_get(t.reg, h);
    assert_non_null(st);
    assert_int_equal(st->n, good[i].n);
    assert_int_equal(st->factors[st->n - 1], good[i].last);
    assert_int_equal(hk_off(t.reg, h), HK_OK);
  }
  lin_free(&m, &t);
}

/* =================================================================================================
   bad parameters and spec strings
   ================================================================================================= */
static void test_bad_parameters(void **state) {
  lin m;
  tr_trainer t;
  (void)state;
  lin_init(&m, &t, TR_OPTIM_SGD, 0.05);
  expect_bad(&t, tr_lr_monitor(t.reg, &(tr_lr_monitor_desc){ .logging_interval = 7 }, NULL), "logging_interval 7 is not valid");
  expect_bad(&t, tr_gradient_monitor(t.reg, &(tr_gradient_monitor_desc){ .log_frequency = -1 }, NULL), "log_frequency must be >= 1");
  expect_bad(&t, tr_gradient_monitor(t.reg, &(tr_gradient_monitor_desc){ .percentiles = "10,150" }, NULL), "is not a list of numbers in [0, 100]");
  expect_bad(&t, tr_gradient_monitor(t.reg, &(tr_gradient_monitor_desc){ .percentiles = "ten" }, NULL), "like \"10,50,90\"");
  expect_bad(&t, tr_gradient_monitor(t.reg, &(tr_gradient_monitor_desc){ .histogram_bins = -3 }, NULL), "histogram_bins must be in 0..100000");
  expect_bad(&t, tr_gradient_monitor(t.reg, &(tr_gradient_monitor_desc){ .vanishing_threshold = NAN }, NULL), "must be finite");
  expect_bad(&t, tr_nan_guard(t.reg, &(tr_nan_guard_desc){ .action = (tr_nan_action)9 }, NULL), "action 9 is not valid (fail, skip_step or stop)");
  expect_bad(&t, tr_nan_guard(t.reg, &(tr_nan_guard_desc){ .check_loss = TR_NO, .check_grads = TR_NO }, NULL), "nothing to check");
  expect_bad(&t, tr_ema(t.reg, &(tr_ema_desc){ .decay = 1 }, NULL), "decay must be in (0, 1)");
  expect_bad(&t, tr_ema(t.reg, &(tr_ema_desc){ .every_n_steps = -2 }, NULL), "every_n_steps must be >= 1");
  expect_bad(&t, tr_ema(t.reg, &(tr_ema_desc){ .swa_epoch_start = 2, .decay = 0.9 }, NULL), "does not take decay");
  expect_bad(&t, tr_lr_finder(t.reg, &(tr_lr_finder_desc){ .min_lr = 1, .max_lr = 0.1 }, NULL), "need 0 < min_lr < max_lr");
  expect_bad(&t, tr_lr_finder(t.reg, &(tr_lr_finder_desc){ .num_training_steps = 1 }, NULL), "num_training_steps must be in 2..1000000");
  expect_bad(&t, tr_lr_finder(t.reg, &(tr_lr_finder_desc){ .early_stop_threshold = 0.5 }, NULL), "early_stop_threshold must be > 1");
  expect_bad(&t, tr_model_summary(t.reg, &(tr_model_summary_desc){ .max_rows = -1 }, NULL), "max_rows must be >= 0");
  expect_bad(&t, tr_accumulation_scheduler(t.reg, &(tr_accumulation_scheduler_desc){ 0 }, NULL), "scheduling is required");
  expect_bad(&t, tr_accumulation_scheduler(t.reg, &(tr_accumulation_scheduler_desc){ .scheduling = "{0: 4, 0: 2}" }, NULL), "epochs must increase (0 after 0)");
  expect_bad(&t, tr_accumulation_scheduler(t.reg, &(tr_accumulation_scheduler_desc){ .scheduling = "{0: 0}" }, NULL), "factor for epoch 0 must be in 1..1000000");
  expect_bad(&t, tr_accumulation_scheduler(t.reg, &(tr_accumulation_scheduler_desc){ .scheduling = "{0 4}" }, NULL), "epoch 0 is not followed by ':'");
  expect_bad(&t, tr_accumulation_scheduler(t.reg, &(tr_accumulation_scheduler_desc){ .scheduling = "{-1: 2}" }, NULL), "'-' at position 1 where an epoch was expected");
  expect_bad_spec(&t, "lr_monitor(logging_interval=batch)", "auto|step|epoch");
  expect_bad_spec(&t, "gradient_monitor(log_frequency=-1)", "log_frequency must be >= 1");
  expect_bad_spec(&t, "gradient_monitor(percentiles=\"5,x\")", "is not a list of numbers");
  expect_bad_spec(&t, "gradient_monitor(exploding_threshold=0)", "would flag every step");
  expect_bad_spec(&t, "nan_guard(action=ignore)", "fail|skip_step|stop");
  expect_bad_spec(&t, "ema(decay=1.5)", "decay must be in (0, 1)");
  expect_bad_spec(&t, "ema(decay=0)", "decay must be in (0, 1)");
  expect_bad_spec(&t, "ema(every_n_steps=0)", "every_n_steps must be >= 1");
  expect_bad_spec(&t, "lr_finder(min_lr=0)", "need 0 < min_lr < max_lr");
  expect_bad_spec(&t, "lr_finder(num_training_steps=1)", "num_training_steps must be in 2..1000000");
  expect_bad_spec(&t, "model_summary(max_rows=-4)", "max_rows must be >= 0");
  expect_bad_spec(&t, "accumulation_scheduler", "scheduling");
  expect_bad_spec(&t, "accumulation_scheduler(scheduling=\"{5: 2, 1: 3}\")", "epochs must increase");
  expect_bad_spec(&t, "nan_guard; ema(decay=2)", "decay must be in (0, 1)");
  assert_int_equal(hk_find(t.reg, "nan_guard"), 0); /* all or nothing */
  /* every one through a spec string at once, on the trainer's registry */
  assert_int_equal(hk_spec_apply(t.reg, "lr_monitor; gradient_monitor(log_frequency=2, histogram_bins=8, percentiles=\"50\"); "
                                        "nan_guard(action=stop); ema(decay=0.9); lr_finder(num_training_steps=20, verbose=false); "
                                        "model_summary(max_rows=0); accumulation_scheduler(scheduling=\"{0: 2}\")"), HK_OK);
  {
    tr_config c = lin_cfg(2);
    assert_int_equal(tr_fit(&t, &c), TR_OK);
    assert_int_equal(t.global_step, 4);
    assert_int_equal(tr_gradient_monitor_get(t.reg, hk_find(t.reg, "gradient_monitor"))->checks, 2);
    assert_int_equal(tr_ema_get(t.reg, hk_find(t.reg, "ema"))->n_averaged, 4);
  }
  lin_free(&m, &t);
}

/* =================================================================================================
   Exact resume with everything registered: 6 epochs in one go = 3 + save + load in a new trainer + 3
   (also from a checkpoint in the middle of an epoch), bit for bit: parameters, the EMA average, the
   finder's learning rate, the accumulation, early stopping and the checkpoints' bookkeeping.
   ================================================================================================= */
typedef struct out6 { float p[4], avg[4]; int64_t step, epoch, ng, es_wait; double lr, best; } out6;
static void add_everything(tr_trainer *t, const char *dir) {
  char spec[1200];
  snprintf(spec, sizeof spec,
           "early_stopping(monitor=val/loss, patience=50); model_checkpoint(dirpath=\"%s\", monitor=val/loss, save_top_k=2, "
           "every_n_train_steps=3, filename=\"{step}\"); lr_monitor(log_momentum=true); gradient_monitor(log_frequency=2); "
           "nan_guard(action=skip_step, verbose=false); ema(decay=0.8, every_n_steps=2); lr_finder(num_training_steps=30, "
           "min_lr=1e-4, max_lr=10, verbose=false); model_summary(max_rows=0); accumulation_scheduler(scheduling=\"{0: 1, 2: 2}\")", dir);
  assert_int_equal(hk_spec_apply(t->reg, spec), HK_OK);
}
static void fill6(out6 *o, lin *m, tr_trainer *t) {
  const tr_ema_state *e = tr_ema_get(t->reg, hk_find(t->reg, "ema"));
  memcpy(o->p, m->p, sizeof o->p);
  memcpy(o->avg, e->average, sizeof o->avg);
  o->step = t->global_step;
  o->epoch = t->epoch;
  o->lr = t->optim.lr;
  o->ng = tr_nan_guard_get(t->reg, hk_find(t->reg, "nan_guard"))->skipped;
  o->es_wait = tr_early_stopping_get(t->reg, hk_find(t->reg, "early_stopping{monitor=val/loss,mode=min}"))->wait_count;
  o->best = tr_model_checkpoint_get(t->reg, hk_find(t->reg, "model_checkpoint{monitor=val/loss,mode=min,every_n_train_steps=3,every_n_epochs=0,train_time_interval=0}"))->best_model_score;
}
static void resume6(int64_t first_steps, int64_t batches_before) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(6);
  out6 whole, split;
  char dir[] = "/tmp/test_cb_b.XXXXXX", ckpt[600];
  assert_non_null(mkdtemp(dir));
  lin_init(&m, &t, TR_OPTIM_ADAMW, 1e-3);
  m.nan_grad_at = 5;
  add_everything(&t, dir);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  fill6(&whole, &m, &t);
  lin_free(&m, &t);
  lin_init(&m, &t, TR_OPTIM_ADAMW, 1e-3);
  m.nan_grad_at = 5;
  add_everything(&t, dir);
  if (first_steps) c.max_steps = first_steps;
  else c.max_epochs = 3;
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  snprintf(ckpt, sizeof ckpt, "%s/step=%lld.ckpt", dir, (long long)t.global_step);
  assert_int_equal(tr_save(&t, ckpt), TR_OK);
  lin_free(&m, &t);
  lin_init(&m, &t, TR_OPTIM_ADAMW, 1e-3); /* a new trainer: the finder must not sweep again */
  m.p[0] = 42;
  add_everything(&t, dir);
  c = lin_cfg(6);
  c.resume_from = ckpt;
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  fill6(&split, &m, &t);
  assert_int_equal(m.forwards, 6 * NBATCH - batches_before); /* only the batches after the checkpoint: no sweep */
  lin_free(&m, &t);
  assert_memory_equal(whole.p, split.p, sizeof whole.p);
  assert_memory_equal(whole.avg, split.avg, sizeof whole.avg);
  assert_int_equal(whole.step, split.step);
  assert_int_equal(whole.epoch, split.epoch);
  assert_true(whole.lr == split.lr && whole.lr != 1e-3);
  assert_int_equal(whole.ng, 1);
  assert_int_equal(split.ng, 1);
  assert_int_equal(whole.es_wait, split.es_wait);
  assert_true(whole.best == split.best);
  assert_int_equal(whole.step, 4 + 4 + 2 + 2 + 2 + 2 - 1); /* accumulation 2 from epoch 2; one step skipped */
  {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
  }
}
static void test_exact_resume_all(void **state) {
  (void)state;
  resume6(0, 12);
}
static void test_exact_resume_all_mid_epoch(void **state) {
  (void)state;
  resume6(5, 6);   /* step 5 after one skipped: the middle of epoch 1 */
  resume6(10, 14); /* the middle of epoch 3, where 2 micro-batches make a step: the factor comes back */
}

/* =================================================================================================
   every factory: its spec table and its desc agree (both come from the TR_<NAME>_PARAMS list): every
   spec key names a desc field (or is a SPEC_ONLY one), every key given reaches its field, and a spec
   with every parameter at its default text makes the same callback as a zero desc
   ================================================================================================= */
/* a desc's fields by name, from the list: offset, size, kind (SPEC_ONLY ones have no field) */
typedef struct field_at { const char *name, *kind; size_t off, size; } field_at;
#define FA(kind, type, name, def, choices, doc) FA_##kind(kind, name)
#define FA_FIELD(kind, name) { #name, #kind, offsetof(D_, name), sizeof(((D_ *)0)->name) },
#define FA_INT FA_FIELD
#define FA_INT_ZERO FA_FIELD
#define FA_DOUBLE FA_FIELD
#define FA_DOUBLE_ZERO FA_FIELD
#define FA_BOOL FA_FIELD
#define FA_TRI FA_FIELD
#define FA_AUTO FA_FIELD
#define FA_STRING FA_FIELD
#define FA_CHOICE FA_FIELD
#define FA_C_ONLY FA_FIELD
#define FA_SPEC_ONLY(kind, name) { #name, #kind, 0, 0 },
#define D_ tr_early_stopping_desc
static const field_at es_fields[] = { TR_EARLY_STOPPING_PARAMS(FA) };
#undef D_
#define D_ tr_model_checkpoint_desc
static const field_at mc_fields[] = { TR_MODEL_CHECKPOINT_PARAMS(FA) };
#undef D_
#define D_ tr_timer_desc
static const field_at timer_fields[] = { TR_TIMER_PARAMS(FA) };
#undef D_
#define D_ tr_lr_monitor_desc
static const field_at lrm_fields[] = { TR_LR_MONITOR_PARAMS(FA) };
#undef D_
#define D_ tr_gradient_monitor_desc
static const field_at gm_fields[] = { TR_GRADIENT_MONITOR_PARAMS(FA) };
#undef D_
#define D_ tr_nan_guard_desc
static const field_at ng_fields[] = { TR_NAN_GUARD_PARAMS(FA) };
#undef D_
#define D_ tr_ema_desc
static const field_at ema_fields[] = { TR_EMA_PARAMS(FA) };
#undef D_
#define D_ tr_lr_finder_desc
static const field_at lrf_fields[] = { TR_LR_FINDER_PARAMS(FA) };
#undef D_
#define D_ tr_model_summary_desc
static const field_at ms_fields[] = { TR_MODEL_SUMMARY_PARAMS(FA) };
#undef D_
#define D_ tr_accumulation_scheduler_desc
static const field_at as_fields[] = { TR_ACCUMULATION_SCHEDULER_PARAMS(FA) };
#undef D_
#define D_ tr_profiler_desc
static const field_at prof_fields[] = { TR_PROFILER_PARAMS(FA) };
#undef D_
#define D_ tr_throughput_monitor_desc
static const field_at tp_fields[] = { TR_THROUGHPUT_MONITOR_PARAMS(FA) };
#undef D_
#define D_ tr_on_exception_checkpoint_desc
static const field_at oec_fields[] = { TR_ON_EXCEPTION_CHECKPOINT_PARAMS(FA) };
#undef D_
#define D_ tr_spike_detection_desc
static const field_at sd_fields[] = { TR_SPIKE_DETECTION_PARAMS(FA) };
#undef D_
#define D_ tr_device_stats_desc
static const field_at ds_fields[] = { TR_DEVICE_STATS_PARAMS(FA) };
#undef D_
#define D_ tr_watchdog_desc
static const field_at wd_fields[] = { TR_WATCHDOG_PARAMS(FA) };
#undef D_
#define D_ tr_param_group_desc
static const field_at pg_fields[] = { TR_PARAM_GROUP_PARAMS(FA) };
#undef D_
#define D_ tr_finetuning_desc
static const field_at ft_fields[] = { TR_FINETUNING_PARAMS(FA) };
#undef D_
#define D_ tr_logger_desc
static const field_at logger_fields[] = { TR_LOGGER_PARAMS(FA) };
#undef D_
#define D_ tr_plot_desc
static const field_at plot_fields[] = { TR_PLOT_PARAMS(FA) };
#undef D_
#define D_ tr_progress_bar_desc
static const field_at bar_fields[] = { TR_PROGRESS_BAR_PARAMS(FA) };
#undef D_

/* the factory's copy alone (tr__<p>_args), into any desc */
#define ARGS_OF(p, T) static tr_err p##_args(const hk_args *a, void *d, tr__why *w) { return tr__##p##_args(a, (T *)d, w); }
ARGS_OF(es, tr_early_stopping_desc) ARGS_OF(mc, tr_model_checkpoint_desc) ARGS_OF(timer, tr_timer_desc)
ARGS_OF(lrm, tr_lr_monitor_desc) ARGS_OF(gm, tr_gradient_monitor_desc) ARGS_OF(ng, tr_nan_guard_desc) ARGS_OF(ema, tr_ema_desc)
ARGS_OF(lrf, tr_lr_finder_desc) ARGS_OF(ms, tr_model_summary_desc) ARGS_OF(as, tr_accumulation_scheduler_desc)
ARGS_OF(prof, tr_profiler_desc) ARGS_OF(tp, tr_throughput_monitor_desc)
ARGS_OF(oec, tr_on_exception_checkpoint_desc) ARGS_OF(sd, tr_spike_detection_desc) ARGS_OF(ds, tr_device_stats_desc) ARGS_OF(wd, tr_watchdog_desc)
ARGS_OF(pg, tr_param_group_desc) ARGS_OF(ft, tr_finetuning_desc)
ARGS_OF(logger, tr_logger_desc) ARGS_OF(plot, tr_plot_desc) ARGS_OF(bar, tr_progress_bar_desc)

/* the same callback from a zero desc (with the required parameters of `required` below) */
static tr_err es_zero(hk_registry *r, hk_handle *h) { return tr_early_stopping(r, &(tr_early_stopping_desc){ .monitor = "val/loss" }, h); }
static tr_err mc_zero(hk_registry *r, hk_handle *h) { return tr_model_checkpoint(r, &(tr_model_checkpoint_desc){ 0 }, h); }
static tr_err timer_zero(hk_registry *r, hk_handle *h) { return tr_timer(r, &(tr_timer_desc){ 0 }, h); }
static tr_err lrm_zero(hk_registry *r, hk_handle *h) { return tr_lr_monitor(r, &(tr_lr_monitor_desc){ 0 }, h); }
static tr_err gm_zero(hk_registry *r, hk_handle *h) { return tr_gradient_monitor(r, &(tr_gradient_monitor_desc){ 0 }, h); }
static tr_err ng_zero(hk_registry *r, hk_handle *h) { return tr_nan_guard(r, &(tr_nan_guard_desc){ 0 }, h); }
static tr_err ema_zero(hk_registry *r, hk_handle *h) { return tr_ema(r, &(tr_ema_desc){ 0 }, h); }
static tr_err lrf_zero(hk_registry *r, hk_handle *h) { return tr_lr_finder(r, &(tr_lr_finder_desc){ 0 }, h); }
static tr_err ms_zero(hk_registry *r, hk_handle *h) { return tr_model_summary(r, &(tr_model_summary_desc){ 0 }, h); }
static tr_err as_zero(hk_registry *r, hk_handle *h) { return tr_accumulation_scheduler(r, &(tr_accumulation_scheduler_desc){ .scheduling = "{0: 2}" }, h); }
static tr_err prof_zero(hk_registry *r, hk_handle *h) { return tr_profiler(r, &(tr_profiler_desc){ 0 }, h); }
static tr_err tp_zero(hk_registry *r, hk_handle *h) { return tr_throughput_monitor(r, &(tr_throughput_monitor_desc){ 0 }, h); }
static tr_err oec_zero(hk_registry *r, hk_handle *h) { return tr_on_exception_checkpoint(r, &(tr_on_exception_checkpoint_desc){ 0 }, h); }
static tr_err sd_zero(hk_registry *r, hk_handle *h) { return tr_spike_detection(r, &(tr_spike_detection_desc){ 0 }, h); }
static tr_err ds_zero(hk_registry *r, hk_handle *h) { return tr_device_stats(r, &(tr_device_stats_desc){ 0 }, h); }
static tr_err wd_zero(hk_registry *r, hk_handle *h) { return tr_watchdog(r, &(tr_watchdog_desc){ .seconds = 600 }, h); }
static tr_err pg_zero(hk_registry *r, hk_handle *h) { return tr_param_group(r, &(tr_param_group_desc){ .match = "x" }, h); }
static tr_err ft_zero(hk_registry *r, hk_handle *h) { return tr_finetuning(r, &(tr_finetuning_desc){ .match = "x" }, h); }
static tr_err csv_zero(hk_registry *r, hk_handle *h) { return tr_csv_logger(r, &(tr_logger_desc){ 0 }, h); }
static tr_err jsonl_zero(hk_registry *r, hk_handle *h) { return tr_jsonl_logger(r, &(tr_logger_desc){ 0 }, h); }
static tr_err tb_zero(hk_registry *r, hk_handle *h) { return tr_tensorboard_logger(r, &(tr_logger_desc){ 0 }, h); }
static tr_err plot_zero(hk_registry *r, hk_handle *h) { return tr_plot(r, &(tr_plot_desc){ { 0 }, 0, 0, 0 }, h); }
static tr_err bar_zero(hk_registry *r, hk_handle *h) { return tr_progress_bar(r, &(tr_progress_bar_desc){ 0 }, h); }

/* Two callbacks' private states are the same: their bytes, once each pointer in them is compared by
   what it points to (STR: a string or NULL; MEM: n bytes) or set aside (PTR: the registry's
   run, buffers that are still empty, pointers into the struct itself). */
#define STR(f) do { \
    if (!x.f != !y.f) fail_msg("%s: " #f " is %s in one, NULL in the other", g_case, x.f ? x.f : y.f); \
    if (x.f) assert_string_equal(x.f, y.f); \
    x.f = y.f = NULL; \
  } while (0)
#define MEM(f, n) do { if ((n) > 0) assert_memory_equal(x.f, y.f, (n)); x.f = y.f = NULL; } while (0)
#define PTR(f) (x.f = y.f = NULL)
static const char *g_case; /* the factory being compared */
static void same_bytes(const void *x, const void *y, size_t n) {
  size_t i;
  for (i = 0; i < n; i++)
    if (((const unsigned char *)x)[i] != ((const unsigned char *)y)[i])
      fail_msg("%s: a spec at its defaults and a zero desc make different callbacks (byte %d of its state)", g_case, (int)i);
}
#define SAME(T, body) \
  static void same_##T(const void *a, const void *b) { \
    T x, y; \
    memcpy(&x, a, sizeof x); \
    memcpy(&y, b, sizeof y); \
    body; \
    same_bytes(&x, &y, sizeof x); \
  }
SAME(tr__es, PTR(run); STR(monitor); STR(message); STR(pub.stopping_reason_message))
SAME(tr__mc, PTR(run); STR(dirpath); STR(filename); STR(monitor); STR(pub.dirpath); STR(pub.best_model_path);
     STR(pub.kth_best_model_path); STR(pub.last_model_path); PTR(pub.best_k_paths); PTR(pub.best_k_scores);
     MEM(pat, x.npat * sizeof(int)); PTR(paths); PTR(scores); STR(best); STR(kth); STR(last); STR(newest); STR(want);
     STR(evict); STR(want_last); STR(old_last); STR(spent))
SAME(tr__timer, PTR(run))
SAME(tr__lrm, PTR(run); STR(pub.name); STR(pub.momentum_name); STR(pub.weight_decay_name))
SAME(tr__gm, PTR(run); STR(filter); PTR(pub.histogram); PTR(hist.edges); PTR(hist.counts); PTR(sel); PTR(names);
     PTR(scratch); PTR(edges); PTR(counts))
SAME(tr__ng, PTR(run); PTR(pub.last))
SAME(tr__ema, PTR(pub.average); PTR(avg))
SAME(tr__lrf, STR(curve_path); MEM(lrs, (size_t)x.steps * sizeof(double)); MEM(losses, (size_t)x.steps * sizeof(double));
     PTR(pub.lrs); PTR(pub.losses))
SAME(tr__ms, PTR(run))
SAME(tr__as, PTR(run); PTR(pub.epochs); PTR(pub.factors))
SAME(tr__plot, STR(path); STR(metrics); STR(title); PTR(series))
/* a file logger's format state (its own): plot's strings; csv's and tensorboard's start empty */
static void same_own(const tr__logger *x, const tr__logger *y) {
  if (x->fmt != y->fmt) fail_msg("%s: two formats", g_case);
  if (!strcmp(x->fmt->name, "plot")) same_tr__plot(x->own, y->own);
  else if (!strcmp(x->fmt->name, "csv")) same_bytes(x->own, y->own, sizeof(tr__csv));
  else if (!strcmp(x->fmt->name, "tensorboard")) same_bytes(x->own, y->own, sizeof(tr__tb));
}
SAME(tr__logger, PTR(run); STR(pub.dir); STR(pub.path); STR(pub.error); STR(save_dir); STR(name); STR(version); STR(dir);
     STR(path); same_own(&x, &y); PTR(own))
SAME(tr__bar, PTR(run))
SAME(tr__prof, PTR(run); PTR(reg); x.self = y.self = 0; x.t_setup = y.t_setup = 0)
SAME(tr__tp, PTR(run); STR(tokens_metric); PTR(t); PTR(samples); PTR(tokens); PTR(scratch))
SAME(tr__oec, PTR(run); PTR(reg); STR(dirpath); STR(path); STR(name); STR(pub.ckpt_path))
SAME(tr__sd, PTR(run); MEM(win, 3 * (size_t)x.window * sizeof(double)); PTR(snap_win); PTR(sorted); PTR(snap))
SAME(tr__ds, PTR(run); STR(nvml_library))
SAME(tr__wd, PTR(reg))
SAME(tr__pg, PTR(run); STR(match); PTR(pub.match); PTR(rule.match); PTR(rule.who))
SAME(tr__ft, PTR(run); STR(match); STR(norms); PTR(rule.match))

typedef struct agree_case {
  const char *factory;
  const hk_param *params;       /* the spec table the factory was registered with */
  int n_params;
  const field_at *fields;       /* the desc's fields, from the list */
  int n_fields;
  size_t desc_size;
  tr_err (*args)(const hk_args *a, void *d, tr__why *w);
  tr_err (*zero)(hk_registry *reg, hk_handle *h);
  void (*same)(const void *a, const void *b);
  const char *required;         /* the required parameters, as zero() gives them */
  const char *unset;            /* keys whose default text is only documentation: given at it, they mean
                                   something the unset field does not (a threshold; the run's directory) */
  const field_at *also;         /* plot: the logger's keys, which go into its desc's dir */
  int n_also;
} agree_case;
#define NOF(a) ((int)(sizeof a / sizeof a[0]))
#define CASE(name, p, zero, T, same, required, unset) CASE_OF(name, p, p, zero, T, same, required, unset)
#define CASE_OF(name, table, p, zero, T, same, required, unset) /* table: the spec table's prefix */ \
  { #name, tr__##table##_params, NOF(tr__##table##_params), p##_fields, NOF(p##_fields), sizeof(T), p##_args, zero, same, \
    required, unset, NULL, 0 }
static agree_case g_agree[] = {
  CASE(early_stopping, es, es_zero, tr_early_stopping_desc, same_tr__es, "monitor=val/loss", " stopping_threshold divergence_threshold "),
  CASE(model_checkpoint, mc, mc_zero, tr_model_checkpoint_desc, same_tr__mc, "", ""),
  CASE(timer, timer, timer_zero, tr_timer_desc, same_tr__timer, "", ""),
  CASE(lr_monitor, lrm, lrm_zero, tr_lr_monitor_desc, same_tr__lrm, "", ""),
  CASE(gradient_monitor, gm, gm_zero, tr_gradient_monitor_desc, same_tr__gm, "", ""),
  CASE(nan_guard, ng, ng_zero, tr_nan_guard_desc, same_tr__ng, "", ""),
  CASE(ema, ema, ema_zero, tr_ema_desc, same_tr__ema, "", ""),
  CASE(lr_finder, lrf, lrf_zero, tr_lr_finder_desc, same_tr__lrf, "", ""),
  CASE(model_summary, ms, ms_zero, tr_model_summary_desc, same_tr__ms, "", ""),
  CASE(accumulation_scheduler, as, as_zero, tr_accumulation_scheduler_desc, same_tr__as, "scheduling=\"{0: 2}\"", ""),
  CASE(profiler, prof, prof_zero, tr_profiler_desc, same_tr__prof, "", ""),
  CASE(throughput_monitor, tp, tp_zero, tr_throughput_monitor_desc, same_tr__tp, "", ""),
  CASE(on_exception_checkpoint, oec, oec_zero, tr_on_exception_checkpoint_desc, same_tr__oec, "", ""),
  CASE(spike_detection, sd, sd_zero, tr_spike_detection_desc, same_tr__sd, "", ""),
  CASE(device_stats, ds, ds_zero, tr_device_stats_desc, same_tr__ds, "", ""),
  CASE(watchdog, wd, wd_zero, tr_watchdog_desc, same_tr__wd, "seconds=600", " seconds "),
  CASE(param_group, pg, pg_zero, tr_param_group_desc, same_tr__pg, "match=x", " lr_mult weight_decay frozen "),
  CASE(finetuning, ft, ft_zero, tr_finetuning_desc, same_tr__ft, "match=x", ""),
  CASE_OF(csv, csv, logger, csv_zero, tr_logger_desc, same_tr__logger, "", " save_dir name version "),
  CASE_OF(jsonl, jsonl, logger, jsonl_zero, tr_logger_desc, same_tr__logger, "", " save_dir name version "),
  CASE_OF(tensorboard, tb, logger, tb_zero, tr_logger_desc, same_tr__logger, "", " save_dir name version "),
  CASE(plot, plot, plot_zero, tr_plot_desc, same_tr__logger, "", " save_dir name version "),
  CASE(progress_bar, bar, bar_zero, tr_progress_bar_desc, same_tr__bar, "", ""),
};
#define N_AGREE ((int)(sizeof g_agree / sizeof g_agree[0]))

static const field_at *field_in(const field_at *f, int n, const char *key) {
  int i;
  for (i = 0; i < n; i++) if (!strcmp(f[i].name, key)) return &f[i];
  return NULL;
}
static const field_at *field_named(const agree_case *c, const char *key) { return field_in(c->fields, c->n_fields, key); }
static int in_words(const char *words, const char *key) { /* key in " a b c " */
  char w[80];
  snprintf(w, sizeof w, " %s ", key);
  return strstr(words, w) != NULL;
}

/* probe_<factory>: the same spec table; its make keeps the desc the factory's copy made */
static union { unsigned char b[512]; double d; int64_t i; void *p; } g_probe; /* any desc, aligned */
static hk_err probe_make(hk_registry *reg, const hk_args *a, void *user) {
  const agree_case *c = (const agree_case *)user;
  tr__why w;
  assert_true(c->desc_size <= sizeof g_probe.b);
  return c->args(a, &g_probe, &w) ? hk_set_error(reg, HK_ERR_INVALID, "%s", w.msg) : HK_OK;
}

/* a value other than the default: what a zero field cannot mean */
static void other_value(const hk_param *p, char *out, size_t cap) {
  const char *bar;
  switch (p->type) {
  case HK_PARAM_INT: snprintf(out, cap, "7"); break;
  case HK_PARAM_DOUBLE: snprintf(out, cap, "0.5"); break;
  case HK_PARAM_BOOL: snprintf(out, cap, "%s", p->def && !strcmp(p->def, "true") ? "false" : "true"); break;
  case HK_PARAM_STRING: snprintf(out, cap, "x"); break;
  case HK_PARAM_CHOICE: /* the second choice: index 1 */
    bar = strchr(p->choices, '|');
    assert_non_null(bar);
    snprintf(out, cap, "%.*s", (int)strcspn(bar + 1, "|"), bar + 1);
    break;
  }
}

static void test_spec_desc_agree(void **state) {
  int i, k, j;
  (void)state;
  g_agree[N_AGREE - 2].also = logger_fields; /* plot */
  g_agree[N_AGREE - 2].n_also = NOF(logger_fields);
  for (i = 0; i < N_AGREE; i++) {
    const agree_case *c = &g_agree[i];
    hk_registry *spec_reg = hk_create(NULL), *zero_reg = hk_create(NULL);
    char spec[2048], probe[80], val[64];
    size_t used;
    hk_handle hs, hz;
    hk_callback cs, cz;
    const field_at *req = NULL;
    g_case = c->factory;
    if (c->required[0]) { /* "key=value" */
      snprintf(val, sizeof val, "%.*s", (int)strcspn(c->required, "="), c->required);
      assert_non_null(req = field_named(c, val));
    }
    assert_int_equal(tr_add_factories(spec_reg), HK_OK);
    assert_int_equal(tr__lrf_factory_add(spec_reg, "lr_finder", "lr_finder"), HK_OK); /* the trainer's own: tr_init registers it */
    /* 1. every spec key is a desc field, or SPEC_ONLY; every field but C_ONLY ones is a spec key */
    for (k = 0; k < c->n_params; k++) {
      const field_at *f = field_named(c, c->params[k].key);
      if (!f) f = field_in(c->also, c->n_also, c->params[k].key);
      if (!f) fail_msg("%s: spec key '%s' has no desc field", c->factory, c->params[k].key);
    }
    for (j = 0; j < c->n_fields; j++) {
      int found = 0;
      for (k = 0; k < c->n_params; k++) found |= !strcmp(c->params[k].key, c->fields[j].name);
      if (found != (strcmp(c->fields[j].kind, "C_ONLY") != 0)) fail_msg("%s: field '%s' (%s) %s a spec key", c->factory,
                                                                   c->fields[j].name, c->fields[j].kind, found ? "is" : "is not");
    }
    /* 2. every key given reaches its field, and only it (the copy alone, through the real parser) */
    snprintf(probe, sizeof probe, "probe_%s", c->factory);
    assert_int_equal(hk_factory_add(spec_reg, probe, c->params, c->n_params, probe_make, (void *)c, "probe"), HK_OK);
    for (k = 0; k < c->n_params; k++) {
      const hk_param *p = &c->params[k];
      const field_at *f = field_named(c, p->key);
      size_t b;
      if (!f || !strcmp(f->kind, "SPEC_ONLY")) continue; /* plot's logger keys: the logger's case */
      other_value(p, val, sizeof val);
      if (f == req) snprintf(spec, sizeof spec, "%s(%s=\"%s\")", probe, p->key, val);
      else snprintf(spec, sizeof spec, "%s(%s%s%s=\"%s\")", probe, c->required, c->required[0] ? ", " : "", p->key, val);
      if (hk_spec_apply(spec_reg, spec) != HK_OK) fail_msg("%s: %s", spec, hk_last_error(spec_reg));
      for (b = 0; b < c->desc_size; b++) {
        int in_field = b >= f->off && b < f->off + f->size, in_req = req && b >= req->off && b < req->off + req->size;
        if (!in_field && !in_req && g_probe.b[b]) fail_msg("%s: byte %d of the desc, outside '%s', was set", spec, (int)b, p->key);
      }
      for (b = f->off; b < f->off + f->size && !g_probe.b[b]; b++) {}
      if (b == f->off + f->size) fail_msg("%s: '%s' did not reach its desc field", spec, p->key);
    }
    /* 3. every parameter at its default text == a zero desc */
    used = (size_t)snprintf(spec, sizeof spec, "%s(%s", c->factory, c->required);
    for (k = 0; k < c->n_params; k++) {
      const hk_param *p = &c->params[k];
      if (!p->def || in_words(c->unset, p->key)) continue;
      used += (size_t)snprintf(spec + used, sizeof spec - used, "%s%s=\"%s\"", used > strlen(c->factory) + 1 ? ", " : "", p->key, p->def);
      assert_true(used < sizeof spec);
    }
    snprintf(spec + used, sizeof spec - used, ")");
    if (hk_spec_apply(spec_reg, spec) != HK_OK) fail_msg("%s: %s", spec, hk_last_error(spec_reg));
    hs = hk_spec_find(spec_reg, c->factory, 0);
    assert_int_not_equal(hs, 0);
    assert_int_equal(c->zero(zero_reg, &hz), TR_OK);
    cs = *hk_callback_get(spec_reg, hs);
    cz = *hk_callback_get(zero_reg, hz);
    assert_string_equal(cs.name, cz.name);
    c->same(cs.user, cz.user);
    cs.name = cz.name = NULL;
    cs.user = cz.user = NULL;
    if (memcmp(&cs, &cz, sizeof cs)) fail_msg("%s: the spec at its defaults registers other functions than a zero desc", spec);
    hk_destroy(spec_reg);
    hk_destroy(zero_reg);
  }
}


/* =================================================================================================
   on_exception_checkpoint and spike_detection
   ================================================================================================= */
static void rm_dir(const char *dir) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}
/* fail (HK_FAIL) or interrupt (SIGINT) at the training batch with this number (1-based, over epochs), in
   on_after_backward: inside the batch, before its step */
typedef struct failer { tr_trainer *t; int64_t at; int sigint; } failer;
static hk_signal fail_at(hk_ctx *ctx, void *user) {
  failer *f = (failer *)user;
  if (f->t->epoch * NBATCH + f->t->epoch_batch + 1 != f->at) return HK_CONTINUE;
  if (f->sigint) { raise(SIGINT); return HK_CONTINUE; }
  return hk_fail(ctx, "failing at batch %lld on purpose", (long long)f->at);
}
/* The final parameters of an uninterrupted fit of 3 epochs. */
static void oec_reference(tr_optim_kind kind, int accum, float out[4]) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(3);
  lin_init(&m, &t, kind, 0.05);
  c.accumulate_grad_batches = accum;
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  memcpy(out, m.p, sizeof m.p);
  lin_free(&m, &t);
}
/* Fail at batch `at` with on_exception_checkpoint registered, then resume from its file: the same bits. */
static void oec_case(tr_optim_kind kind, int accum, int64_t at, int sigint) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(3);
  char dir[] = "/tmp/tr_oec_XXXXXX", path[64];
  float want[4];
  failer f;
  hk_handle h;
  tr_err e;
  oec_reference(kind, accum, want);
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/ckpts/on_exception.ckpt", dir);
  lin_init(&m, &t, kind, 0.05);
  f.t = &t; f.at = at; f.sigint = sigint;
  c.accumulate_grad_batches = accum;
  c.no_sigint = !sigint;
  {
    char sub[64];
    snprintf(sub, sizeof sub, "%s/ckpts", dir);
    assert_int_equal(tr_on_exception_checkpoint(t.reg, &(tr_on_exception_checkpoint_desc){ .dirpath = sub }, &h), TR_OK);
  }
  assert_int_equal(hk_on(t.reg, HK_ON_AFTER_BACKWARD, fail_at, &f, NULL, NULL), HK_OK);
  e = tr_fit(&t, &c);
  assert_int_equal(e, sigint ? TR_ERR_INTERRUPTED : TR_ERR_HOOK);
  assert_int_equal(tr_on_exception_checkpoint_get(t.reg, h)->saved, 1);
  assert_string_equal(tr_on_exception_checkpoint_get(t.reg, h)->ckpt_path, path);
  assert_non_null(strstr(lin_logtext(&m), "saved its state after step"));
  lin_free(&m, &t);
  assert_int_equal(access(path, F_OK), 0);
  lin_init(&m, &t, kind, 0.05); /* a new process, as it were */
  c = lin_cfg(3);
  c.accumulate_grad_batches = accum;
  c.resume_from = path;
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  if (memcmp(m.p, want, sizeof want))
    fail_msg("resumed after a failure at batch %lld (accumulation %d%s): w0 %.9g, want %.9g", (long long)at, accum,
             sigint ? ", Ctrl-C" : "", m.p[0], want[0]);
  lin_free(&m, &t);
  rm_dir(dir);
}
static void test_on_exception_checkpoint_resume(void **state) {
  (void)state;
  oec_case(TR_OPTIM_ADAMW, 1, 6, 0);  /* inside batch 6: it is repeated */
  oec_case(TR_OPTIM_SGD, 2, 6, 0);    /* the second micro-batch of a window: the whole window is repeated */
  oec_case(TR_OPTIM_ADAMW, 2, 5, 0);  /* the first one */
  oec_case(TR_OPTIM_ADAMW, 1, 7, 1);  /* Ctrl-C: the batch ends, then the run */
  oec_case(TR_OPTIM_SGD, 2, 5, 1);    /* Ctrl-C after a window's first micro-batch: the window is undone */
}
/* Nothing is saved before training starts (a failed setup must not overwrite a good file), nor after a
   fit that got through; a directory that cannot be made fails the run at on_fit_start; one made unusable
   during the run is reported at the save, the run's error stands. */
static hk_signal fail_now(hk_ctx *ctx, void *user) { (void)user; return hk_fail(ctx, "no"); }
static hk_signal block_dir(hk_ctx *ctx, void *user) { /* the checked directory replaced by a file */
  FILE *f;
  (void)ctx;
  if (rmdir((const char *)user) == 0 && (f = fopen((const char *)user, "w")) != NULL) fclose(f);
  return HK_CONTINUE;
}
static void test_on_exception_checkpoint_when(void **state) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(1);
  char dir[] = "/tmp/tr_oec_XXXXXX", path[64];
  hk_handle h;
  (void)state;
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/on_exception.ckpt", dir);
  lin_init(&m, &t, TR_OPTIM_ADAMW, 0.05);
  assert_int_equal(hk_spec_apply(t.reg, "on_exception_checkpoint(dirpath=\"/tmp\", filename=\"x\")"), HK_OK);
  assert_int_equal(hk_off(t.reg, hk_spec_find(t.reg, "on_exception_checkpoint", 0)), HK_OK);
  assert_int_equal(tr_on_exception_checkpoint(t.reg, &(tr_on_exception_checkpoint_desc){ .dirpath = dir, .verbose = TR_NO }, &h), TR_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_FIT_START, fail_now, NULL, NULL, NULL), HK_OK);
  assert_int_equal(tr_fit(&t, &c), TR_ERR_HOOK);
  assert_int_equal(tr_on_exception_checkpoint_get(t.reg, h)->saved, 0);
  assert_int_not_equal(access(path, F_OK), 0);
  lin_free(&m, &t);
  /* on_fit_end fails after training went through: not saved either */
  lin_init(&m, &t, TR_OPTIM_ADAMW, 0.05);
  assert_int_equal(tr_on_exception_checkpoint(t.reg, &(tr_on_exception_checkpoint_desc){ .dirpath = dir }, &h), TR_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_FIT_END, fail_now, NULL, NULL, NULL), HK_OK);
  assert_int_equal(tr_fit(&t, &c), TR_ERR_HOOK);
  assert_int_not_equal(access(path, F_OK), 0);
  lin_free(&m, &t);
  /* the directory cannot be made (a file is in the way): the run fails at on_fit_start, before a step, naming it */
  lin_init(&m, &t, TR_OPTIM_ADAMW, 0.05);
  {
    char file[80], sub[96];
    FILE *fp;
    snprintf(file, sizeof file, "%s/file", dir);
    assert_non_null(fp = fopen(file, "w"));
    fclose(fp);
    snprintf(sub, sizeof sub, "%s/sub", file);
    assert_int_equal(tr_on_exception_checkpoint(t.reg, &(tr_on_exception_checkpoint_desc){ .dirpath = sub }, &h), TR_OK);
  }
  assert_int_equal(tr_fit(&t, &c), TR_ERR_HOOK);
  assert_int_equal(t.global_step, 0);
  if (!strstr(tr_error(&t), "'on_exception_checkpoint' failed in on_fit_start: cannot create the directory '") ||
      !strstr(tr_error(&t), "/file/sub': Not a directory"))
    fail_msg("got: %s", tr_error(&t));
  assert_int_equal(tr_on_exception_checkpoint_get(t.reg, h)->saved, 0);
  lin_free(&m, &t);
  /* a file put in its place during the run: said at the save, and the run's error is the hook's */
  lin_init(&m, &t, TR_OPTIM_ADAMW, 0.05);
  {
    static char late[96];
    snprintf(late, sizeof late, "%s/late", dir);
    assert_int_equal(tr_on_exception_checkpoint(t.reg, &(tr_on_exception_checkpoint_desc){ .dirpath = late }, &h), TR_OK);
    assert_int_equal(hk_on(t.reg, HK_ON_TRAIN_START, block_dir, late, NULL, NULL), HK_OK);
  }
  {
    failer f = { &t, 2, 0 };
    assert_int_equal(hk_on(t.reg, HK_ON_AFTER_BACKWARD, fail_at, &f, NULL, NULL), HK_OK);
    assert_int_equal(tr_fit(&t, &c), TR_ERR_HOOK);
  }
  assert_non_null(strstr(tr_error(&t), "failing at batch 2"));
  assert_int_equal(tr_on_exception_checkpoint_get(t.reg, h)->last_error, TR_ERR_IO);
  assert_non_null(strstr(lin_logtext(&m), "could not save"));
  lin_free(&m, &t);
  rm_dir(dir);
}

/* A save that fails (here: a directory where the file goes; EIO and a full disk take the same path) is
   reported with its own reason, not the failing run's error (issue 28 item 10). */
static void test_on_exception_checkpoint_save_error(void **state) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(3);
  char dir[] = "/tmp/test_oec_err_XXXXXX", path[80];
  const char *text, *line;
  hk_handle h;
  failer f;
  (void)state;
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/on_exception.ckpt", dir);
  assert_int_equal(mkdir(path, 0700), 0);
  lin_init(&m, &t, TR_OPTIM_ADAMW, 0.05);
  f.t = &t;
  f.at = 2;
  f.sigint = 0;
  assert_int_equal(tr_on_exception_checkpoint(t.reg, &(tr_on_exception_checkpoint_desc){ .dirpath = dir }, &h), TR_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_AFTER_BACKWARD, fail_at, &f, NULL, NULL), HK_OK);
  assert_int_equal(tr_fit(&t, &c), TR_ERR_HOOK);
  assert_non_null(strstr(tr_error(&t), "failing at batch 2")); /* the run's own error stands */
  assert_int_equal(tr_on_exception_checkpoint_get(t.reg, h)->last_error, TR_ERR_IO);
  text = lin_logtext(&m);
  assert_non_null(line = strstr(text, "could not save '"));
  assert_null(strstr(line, "failing at batch")); /* not the run's error */
  assert_non_null(strstr(line, "on_exception.ckpt"));
  assert_non_null(strstr(line, "directory"));
  lin_free(&m, &t);
  rmdir(path);
  rm_dir(dir);
}

/* A loop of its own on the lin model (plain SGD, lr 0.05): its state is the parameters (one region),
   its step count ctx.global_step. skip_lo..skip_hi: batches (1-based) it skips itself (the reference);
   spike_at: the batch whose loss is reported 1e6 times too large. */
static int g_own_late;             /* 1: ctx.grads' data NULL until the first backward (llm.c); 2: never set; 3: ctx.params' never set */
static const char *g_own_save_dir; /* tr_run_desc.save_dir (NULL: "runs") */
static int own_save(void *user, FILE *f) { return fwrite(((lin *)user)->p, sizeof(float), 4, f) == 4 ? 0 : -1; }
static int own_load(void *user, FILE *f) { return fread(((lin *)user)->p, sizeof(float), 4, f) == 4 ? 0 : -1; }
static tr_err own_loop(lin *m, hk_registry *reg, int64_t batches, int64_t spike_at, int64_t skip_lo, int64_t skip_hi,
                       int64_t fail_at, const char *resume) {
  tr_region r = { m->p, sizeof m->p };
  hk_tensor params[1], grads[1];
  hk_ctx ctx;
  hk_flow flow;
  int64_t b = 0;
  tr_err e;
  memset(&ctx, 0, sizeof ctx);
  memset(&flow, 0, sizeof flow);
  params[0].name = "p"; params[0].data = m->p; params[0].count = 4; params[0].on_device = 0;
  grads[0].name = "p"; grads[0].data = m->g; grads[0].count = 4; grads[0].on_device = 0;
  if (g_own_late == 1 || g_own_late == 2) grads[0].data = NULL;
  if (g_own_late == 3) params[0].data = NULL;
  ctx.params = params;
  ctx.grads = grads;
  ctx.n_tensors = 1;
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .log = m->log.f, .no_signals = 1, .state = &r, .n_state = 1,
                                                     .save_model = own_save, .load_model = own_load, .model_user = m,
                                                     .save_dir = g_own_save_dir }), TR_OK);
  if (tr_run_start(reg, &ctx, resume) == TR_OK) {
    if (resume) b = ctx.batch_idx;
    while (b < batches) {
      void *batch = (void *)(intptr_t)(b % NBATCH);
      double loss;
      unsigned next;
      int k;
      b++;
      ctx.batch_idx = b;
      HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, &ctx, &flow);
      if (!HK_FLOW_HAS(&flow, HK_FLOW_SKIP_BATCH) && !(b >= skip_lo && b <= skip_hi)) {
        lin_forward(m, batch, 1, &loss);
        ctx.loss = b == spike_at ? loss * 1e6 : loss;
        HK_FIRE_FLOW(reg, HK_ON_BEFORE_BACKWARD, &ctx, &flow);
        if (b == fail_at) { /* as a failing model: the loop ends with ctx as after the last step */
          tr_run_fail(reg, TR_ERR_MODEL, "batch %lld failed on purpose", (long long)b);
          ctx.batch_idx = b - 1;
        }
        if (!HK_FLOW_HAS(&flow, HK_FLOW_SKIP_BATCH) && b != fail_at) {
          memset(m->g, 0, sizeof m->g);
          lin_backward(m, batch);
          if (g_own_late == 1) grads[0].data = m->g; /* the buffer exists now: its view points at it */
          hk_grads_changed(&ctx);
          HK_FIRE_FLOW(reg, HK_ON_AFTER_BACKWARD, &ctx, &flow);
          HK_FIRE_FLOW(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &ctx, &flow);
          if (!HK_FLOW_HAS(&flow, HK_FLOW_SKIP_STEP)) {
            for (k = 0; k < 4; k++) m->p[k] -= 0.05f * m->g[k];
            ctx.global_step++;
            HK_FIRE_FLOW(reg, HK_ON_AFTER_OPTIMIZER_STEP, &ctx, &flow);
          }
        }
      }
      if (b == fail_at) break;
      HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);
      next = tr_run_batch_end(reg, &ctx, &flow);
      hk_flow_clear(&flow, HK_FLOW_BATCH_SIGNALS);
      if (next & TR_RUN_STOP) break;
    }
  }
  e = tr_run_finish(reg, &ctx, TR_OK);
  hk_ctx_free(&ctx);
  return e;
}
static void own_init(lin *m) {
  tr_trainer t; /* lin_init's data; the trainer itself is not used */
  lin_init(m, &t, TR_OPTIM_SGD, 0.05);
  m->t = NULL;
  tr_free(&t);
}
static void test_on_exception_checkpoint_own_loop(void **state) {
  lin m;
  hk_registry *reg;
  char dir[] = "/tmp/tr_oec_XXXXXX", path[64];
  float want[4];
  (void)state;
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/on_exception.ckpt", dir);
  own_init(&m); /* the run that does not fail */
  reg = hk_create(NULL);
  assert_int_equal(own_loop(&m, reg, 12, 0, 0, 0, 0, NULL), TR_OK);
  memcpy(want, m.p, sizeof want);
  hk_destroy(reg);
  memlog_close(&m.log);
  own_init(&m); /* fails inside batch 7 (the loop calls tr_run_finish with the state after step 6) */
  reg = hk_create(NULL);
  assert_int_equal(tr_run_setup(reg, NULL), TR_OK);
  assert_int_equal(hk_spec_apply(reg, "on_exception_checkpoint(dirpath=\"/tmp\")"), HK_OK); /* replaced below */
  assert_int_equal(hk_off(reg, hk_spec_find(reg, "on_exception_checkpoint", 0)), HK_OK);
  assert_int_equal(tr_on_exception_checkpoint(reg, &(tr_on_exception_checkpoint_desc){ .dirpath = dir }, NULL), TR_OK);
  assert_int_equal(own_loop(&m, reg, 12, 0, 0, 0, 7, NULL), TR_ERR_MODEL);
  assert_non_null(strstr(lin_logtext(&m), "saved its state after step 6"));
  hk_destroy(reg);
  memlog_close(&m.log);
  own_init(&m); /* resumes: batch 7 on */
  reg = hk_create(NULL);
  assert_int_equal(own_loop(&m, reg, 12, 0, 0, 0, 0, path), TR_OK);
  assert_memory_equal(m.p, want, sizeof want);
  hk_destroy(reg);
  memlog_close(&m.log);
  rm_dir(dir);
}

/* issue 36 item 5: late buffers. llm.c allocates its gradients inside the first backward, so ctx.grads'
   data is NULL at on_train_start and set right after that backward. Every battery that reads the
   gradients or parameters checks them where it first reads them: the run is the same as with the buffer
   there from the start (before: gradient_monitor failed at on_train_start with a message cut off
   mid-sentence that named it twice). */
static void test_late_grads_own_loop(void **state) {
  lin m;
  hk_registry *reg;
  float want[4];
  const tr_gradient_monitor_state *gm;
  (void)state;
  own_init(&m);
  reg = hk_create(NULL);
  assert_int_equal(own_loop(&m, reg, 12, 0, 0, 0, 0, NULL), TR_OK); /* the buffer there from the start */
  memcpy(want, m.p, sizeof want);
  hk_destroy(reg);
  memlog_close(&m.log);
  own_init(&m);
  reg = hk_create(NULL);
  assert_int_equal(tr_run_setup(reg, NULL), TR_OK);
  assert_int_equal(hk_spec_apply(reg, "gradient_monitor(log_frequency=1, percentiles=\"50\", histogram_bins=4); nan_guard; "
                                      "spike_detection(every_n_steps=3); ema(decay=0.5); model_summary; throughput_monitor"), HK_OK);
  g_own_late = 1;
  if (own_loop(&m, reg, 12, 0, 0, 0, 0, NULL) != TR_OK) fail_msg("%s", tr_run_error(reg));
  g_own_late = 0;
  assert_memory_equal(m.p, want, sizeof want);
  gm = tr_gradient_monitor_get(reg, hk_spec_find(reg, "gradient_monitor", 0));
  assert_int_equal(gm->checks, 12);
  assert_int_equal(gm->n_tensors, 1);
  assert_true(gm->total_norm > 0 && gm->histogram != NULL);
  assert_int_equal(tr_ema_get(reg, hk_spec_find(reg, "ema", 0))->n_averaged, 12);
  assert_non_null(strstr(lin_logtext(&m), "Total params (1 tensors)"));
  hk_destroy(reg);
  memlog_close(&m.log);
}
/* A view the loop never points at its buffer: each battery fails where it first reads it, with a whole
   sentence naming the view and the event, and its own name once (before: nan_guard and spike_detection
   read through NULL, ema wrote through it). */
static void late_never_case(const char *spec, int late, const char *who, const char *event, const char *view) {
  lin m;
  hk_registry *reg;
  char want[300];
  const char *err, *p;
  int n = 0;
  own_init(&m);
  reg = hk_create(NULL);
  assert_int_equal(tr_run_setup(reg, NULL), TR_OK);
  assert_int_equal(hk_spec_apply(reg, spec), HK_OK);
  g_own_late = late;
  assert_int_equal(own_loop(&m, reg, 12, 0, 0, 0, 0, NULL), TR_ERR_HOOK);
  g_own_late = 0;
  err = tr_run_error(reg);
  snprintf(want, sizeof want, "callback '%s' failed in %s: %s ('p') has no data (NULL) at %s, where it is first read: point "
           "each view at its buffer by then (llm.c's gradients: after the first backward)", who, event, view, event);
  if (!strstr(err, want)) fail_msg("error: %s\nwant: %s", err, want);
  for (p = err; (p = strstr(p, who)) != NULL; p++) n++;
  assert_int_equal(n, 1);
  hk_destroy(reg);
  memlog_close(&m.log);
}
static void test_late_grads_never_set(void **state) {
  (void)state;
  late_never_case("gradient_monitor(log_frequency=1)", 2, "gradient_monitor", "on_before_optimizer_step", "ctx->grads[0]");
  late_never_case("nan_guard", 2, "nan_guard", "on_before_optimizer_step", "ctx->grads[0]");
  late_never_case("spike_detection", 2, "spike_detection", "on_before_optimizer_step", "ctx->grads[0]");
  late_never_case("ema", 3, "ema", "on_after_optimizer_step", "ctx->params[0]");
}

/* issue 36 item 6: one resume path. on_exception_checkpoint without a dirpath saves where
   model_checkpoint's last.ckpt goes by default, the run directory's checkpoints/: a failed run's file
   and a finished run's are found in one place, and resuming from the first continues that run there
   (before: dirpath was required). */
static void test_on_exception_checkpoint_default_dir(void **state) {
  lin m;
  hk_registry *reg;
  char dir[] = "/tmp/tr_oecd_XXXXXX", ckdir[128], oec_path[160], last[160];
  const tr_on_exception_checkpoint_state *o;
  float want[4];
  (void)state;
  assert_non_null(mkdtemp(dir));
  snprintf(ckdir, sizeof ckdir, "%s/lightning_logs/version_0/checkpoints", dir);
  snprintf(oec_path, sizeof oec_path, "%s/on_exception.ckpt", ckdir);
  snprintf(last, sizeof last, "%s/last.ckpt", ckdir);
  own_init(&m); /* the run that does not fail */
  reg = hk_create(NULL);
  assert_int_equal(own_loop(&m, reg, 12, 0, 0, 0, 0, NULL), TR_OK);
  memcpy(want, m.p, sizeof want);
  hk_destroy(reg);
  memlog_close(&m.log);
  g_own_save_dir = dir;
  own_init(&m); /* fails inside batch 7 */
  reg = hk_create(NULL);
  assert_int_equal(tr_run_setup(reg, NULL), TR_OK);
  assert_int_equal(hk_spec_apply(reg, "csv; on_exception_checkpoint; model_checkpoint(every_n_train_steps=4, save_last=true)"), HK_OK);
  assert_int_equal(own_loop(&m, reg, 12, 0, 0, 0, 7, NULL), TR_ERR_MODEL);
  o = tr_on_exception_checkpoint_get(reg, hk_spec_find(reg, "on_exception_checkpoint", 0));
  assert_int_equal(o->saved, 1);
  assert_string_equal(o->ckpt_path, oec_path);
  assert_string_equal(tr_model_checkpoint_get(reg, hk_spec_find(reg, "model_checkpoint", 0))->dirpath, ckdir);
  assert_int_equal(access(oec_path, F_OK), 0);
  assert_int_equal(access(last, F_OK), 0); /* step 4's, beside it */
  hk_destroy(reg);
  memlog_close(&m.log);
  own_init(&m); /* resumes from it: the same run directory, the same bits */
  reg = hk_create(NULL);
  assert_int_equal(tr_run_setup(reg, NULL), TR_OK);
  assert_int_equal(hk_spec_apply(reg, "csv; on_exception_checkpoint; model_checkpoint(every_n_train_steps=4, save_last=true)"), HK_OK);
  if (own_loop(&m, reg, 12, 0, 0, 0, 0, oec_path) != TR_OK) fail_msg("%s", tr_run_error(reg));
  assert_memory_equal(m.p, want, sizeof want);
  assert_string_equal(tr_on_exception_checkpoint_get(reg, hk_spec_find(reg, "on_exception_checkpoint", 0))->ckpt_path, oec_path);
  assert_string_equal(tr_model_checkpoint_get(reg, hk_spec_find(reg, "model_checkpoint", 0))->last_model_path, last);
  hk_destroy(reg);
  memlog_close(&m.log);
  g_own_save_dir = NULL;
  rm_dir(dir);
}

/* spike_detection in a loop of its own: a spike at batch 9 with a snapshot every 3 steps rolls back to
   step 6 and skips batch 10 (skip_after 1): the same bits as the loop that skips batches 7..10. */
static void test_spike_detection_own_loop(void **state) {
  lin m;
  hk_registry *reg;
  hk_handle h;
  float want[4];
  const tr_spike_detection_state *st;
  (void)state;
  own_init(&m);
  reg = hk_create(NULL);
  assert_int_equal(own_loop(&m, reg, 16, 0, 7, 10, 0, NULL), TR_OK);
  memcpy(want, m.p, sizeof want);
  hk_destroy(reg);
  memlog_close(&m.log);
  own_init(&m);
  reg = hk_create(NULL);
  assert_int_equal(tr_run_setup(reg, NULL), TR_OK);
  assert_int_equal(hk_spec_apply(reg, "spike_detection(window=3, threshold=100, every_n_steps=3, skip_after=1)"), HK_OK);
  h = hk_spec_find(reg, "spike_detection", 0);
  assert_int_equal(own_loop(&m, reg, 16, 9, 0, 0, 0, NULL), TR_OK);
  st = tr_spike_detection_get(reg, h);
  assert_int_equal(st->spikes, 1);
  assert_int_equal(st->rollbacks, 1);
  assert_int_equal(st->skipped_batches, 4);
  assert_int_equal(st->last_first, 7);
  assert_int_equal(st->last_last, 10);
  assert_int_equal(st->snapshot_step, 12);
  if (memcmp(m.p, want, sizeof want)) fail_msg("own loop: w0 %.9g after the rollback, %.9g skipping", m.p[0], want[0]);
  assert_non_null(strstr(lin_logtext(&m), "rolled back to step 6, 3 batches undone, 1 more to skip"));
  hk_destroy(reg);
  memlog_close(&m.log);
  /* no state to snapshot: refused when training starts */
  own_init(&m);
  reg = hk_create(NULL);
  assert_int_equal(tr_spike_detection(reg, &(tr_spike_detection_desc){ 0 }, NULL), TR_OK);
  {
    hk_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .log = m.log.f, .no_signals = 1 }), TR_OK);
    assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_ERR_HOOK);
    assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_ERR_HOOK);
    assert_non_null(strstr(tr_run_error(reg), "no training state to snapshot"));
    hk_ctx_free(&ctx);
  }
  hk_destroy(reg);
  memlog_close(&m.log);
}

/* The trainer: the lin model reports a 1e6 times larger loss at training batch spike_at (1-based over
   epochs); skip_lo..skip_hi are batches a hook skips (the reference). */
typedef struct spiker { tr_trainer *t; int64_t spike_at, lo, hi; } spiker;
static int64_t batch_no(const tr_trainer *t) { return t->epoch * NBATCH + t->epoch_batch + 1; }
static hk_signal spike_skip(hk_ctx *ctx, void *user) {
  spiker *s = (spiker *)user;
  int64_t b = batch_no(s->t);
  (void)ctx;
  return b >= s->lo && b <= s->hi ? HK_SKIP_BATCH : HK_CONTINUE;
}
static hk_signal spike_make(hk_ctx *ctx, void *user) { /* the first hook of on_before_backward: the loss the others see */
  spiker *s = (spiker *)user;
  if (batch_no(s->t) == s->spike_at) ctx->loss *= 1e6;
  return HK_CONTINUE;
}
typedef struct sd_run { float p[4], m[4], v[4]; int64_t step; tr_spike_detection_state st; } sd_run;
static void sd_fit(sd_run *out, int64_t spike_at, int64_t lo, int64_t hi, const char *spec, const char *save_at_7, const char *resume) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(4);
  spiker s;
  hk_handle h = 0;
  lin_init(&m, &t, TR_OPTIM_ADAMW, 0.05);
  s.t = &t; s.spike_at = spike_at; s.lo = lo; s.hi = hi;
  c.val = NULL;
  assert_int_equal(hk_on(t.reg, HK_ON_TRAIN_BATCH_START, spike_skip, &s, NULL, NULL), HK_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_BEFORE_BACKWARD, spike_make, &s, &(hk_opts){ .order = -100 }, NULL), HK_OK);
  if (spec) {
    assert_int_equal(hk_spec_apply(t.reg, spec), HK_OK);
    h = hk_spec_find(t.reg, "spike_detection", 0);
  }
  if (save_at_7) {
    c.max_steps = 7;
    assert_int_equal(tr_fit(&t, &c), TR_OK);
    assert_int_equal(tr_save(&t, save_at_7), TR_OK);
    lin_free(&m, &t);
    return;
  }
  c.resume_from = resume;
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  memcpy(out->p, m.p, sizeof m.p);
  memcpy(out->m, t.tr__m, sizeof out->m);
  memcpy(out->v, t.tr__v, sizeof out->v);
  out->step = t.global_step;
  if (h) out->st = *tr_spike_detection_get(t.reg, h);
  lin_free(&m, &t);
}
static void same_run(const sd_run *a, const sd_run *b, const char *what) {
  if (memcmp(a->p, b->p, sizeof a->p) || memcmp(a->m, b->m, sizeof a->m) || memcmp(a->v, b->v, sizeof a->v) || a->step != b->step)
    fail_msg("%s: w0 %.9g step %lld, want w0 %.9g step %lld", what, a->p[0], (long long)a->step, b->p[0], (long long)b->step);
}
static void test_spike_detection_rollback_exact(void **state) {
  sd_run want, got, resumed, two;
  char dir[] = "/tmp/tr_sd_XXXXXX", path[64];
  const char *spec = "spike_detection(window=3, threshold=100, every_n_steps=3, skip_after=1, verbose=false)";
  (void)state;
  memset(&want, 0, sizeof want); memset(&got, 0, sizeof got); memset(&resumed, 0, sizeof resumed); memset(&two, 0, sizeof two);
  /* the spike at batch 9 (epoch 2's first); snapshots after steps 3 and 6: back to step 6, batches 7..9 undone, 10 skipped */
  sd_fit(&want, 0, 7, 10, NULL, NULL, NULL);
  sd_fit(&got, 9, 0, 0, spec, NULL, NULL);
  same_run(&got, &want, "rollback at batch 9");
  assert_int_equal(got.step, 12);
  assert_int_equal(got.st.rollbacks, 1);
  assert_int_equal(got.st.skipped_batches, 4);
  assert_int_equal(got.st.last_first, 7);
  assert_int_equal(got.st.last_last, 10);
  assert_true(got.st.last_loss > 1e3);
  /* a checkpoint after step 7 holds the snapshot of step 6: the resumed run rolls back to it too */
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/at7.ckpt", dir);
  sd_fit(NULL, 9, 0, 0, spec, path, NULL);
  sd_fit(&resumed, 9, 0, 0, spec, NULL, path);
  same_run(&resumed, &want, "resumed at step 7, rollback at batch 9");
  assert_int_equal(resumed.st.skipped_batches, 4);
  rm_dir(dir);
  /* the median and zscore rules find the same spike */
  sd_fit(&two, 9, 0, 0, "spike_detection(window=4, centre=median, mode=zscore, threshold=50, every_n_steps=3, skip_after=1, verbose=false)",
         NULL, NULL);
  same_run(&two, &want, "median/zscore");
}
/* A non-finite gradient is a spike; max_rollbacks=0 fails at the first spike, as Lightning's SpikeDetection. */
static void test_spike_detection_grads_and_limit(void **state) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(3);
  hk_handle h;
  (void)state;
  lin_init(&m, &t, TR_OPTIM_SGD, 0.05);
  m.nan_grad_at = 6;
  c.val = NULL;
  assert_int_equal(tr_spike_detection(t.reg, &(tr_spike_detection_desc){ .every_n_steps = 2 }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(tr_spike_detection_get(t.reg, h)->rollbacks, 1);
  assert_int_equal(tr_spike_detection_get(t.reg, h)->skipped_batches, 2); /* back to step 4: batches 5 and 6 */
  assert_int_equal(t.global_step, 10);
  assert_true(hk_is_finite(m.p[3]));
  assert_non_null(strstr(lin_logtext(&m), "the gradient norm is not finite at step 6: rolled back to step 4"));
  lin_free(&m, &t);
  lin_init(&m, &t, TR_OPTIM_SGD, 0.05);
  m.nan_grad_at = 6;
  c.val = NULL;
  assert_int_equal(hk_spec_apply(t.reg, "spike_detection(max_rollbacks=0)"), HK_OK);
  assert_int_equal(tr_fit(&t, &c), TR_ERR_HOOK);
  assert_non_null(strstr(tr_error(&t), "callback 'spike_detection' failed in "));
  assert_non_null(strstr(tr_error(&t), ": the gradient norm is not finite at step 6")); /* its name once (issue 28 item 17) */
  assert_null(strstr(tr_error(&t), "spike_detection: "));
  assert_non_null(strstr(tr_error(&t), "0 rollbacks already (max_rollbacks 0)"));
  lin_free(&m, &t);
}
static void test_rescue_bad_parameters(void **state) {
  lin m;
  tr_trainer t;
  (void)state;
  lin_init(&m, &t, TR_OPTIM_SGD, 0.05);
  expect_bad(&t, tr_on_exception_checkpoint(t.reg, &(tr_on_exception_checkpoint_desc){ .dirpath = "d", .filename = "a/b" }, NULL), "without '/'");
  expect_bad_spec(&t, "on_exception_checkpoint(dirpath=d, filename=\"\")", "must be a file name");
  expect_bad(&t, tr_spike_detection(t.reg, &(tr_spike_detection_desc){ .window = 1 }, NULL), "window must be in 2..10000, got 1");
  expect_bad(&t, tr_spike_detection(t.reg, &(tr_spike_detection_desc){ .threshold = -1 }, NULL), "threshold must be finite and > 0");
  expect_bad(&t, tr_spike_detection(t.reg, &(tr_spike_detection_desc){ .threshold = NAN }, NULL), "threshold must be finite");
  expect_bad(&t, tr_spike_detection(t.reg, &(tr_spike_detection_desc){ .every_n_steps = -3 }, NULL), "every_n_steps must be >= 1");
  expect_bad(&t, tr_spike_detection(t.reg, &(tr_spike_detection_desc){ .skip_after = -1 }, NULL), "skip_after must be in 0..2^53");
  expect_bad(&t, tr_spike_detection(t.reg, &(tr_spike_detection_desc){ .max_rollbacks = -2 }, NULL), "max_rollbacks must be >= 0, or -1");
  expect_bad(&t, tr_spike_detection(t.reg, &(tr_spike_detection_desc){ .centre = (tr_spike_centre)7 }, NULL), "centre 7 is not valid");
  expect_bad_spec(&t, "spike_detection(window=0)", "window must be in 2..10000, got 0");
  expect_bad_spec(&t, "spike_detection(threshold=0)", "threshold must be finite and > 0, got 0");
  expect_bad_spec(&t, "spike_detection(every_n_steps=0)", "every_n_steps must be >= 1, got 0");
  expect_bad_spec(&t, "spike_detection(mode=absolute)", "relative|zscore");
  expect_bad(&t, tr_run_setup(t.reg, &(tr_run_desc){ .n_state = 1 }), "n_state is 1 with state NULL");
  {
    tr_region r = { NULL, 4 };
    expect_bad(&t, tr_run_setup(t.reg, &(tr_run_desc){ .state = &r, .n_state = 1 }), "state[0] has data NULL");
  }
  lin_free(&m, &t);
}

/* =================================================================================================
   device_stats
   ================================================================================================= */
typedef struct ds_watch {
  hk_registry *reg;
  hk_handle h;
  int64_t last;                   /* readings at the previous event */
  int n_read;
  int64_t read_at[32];            /* global_step of each reading, as a hook after it sees it (-1 - epoch: at an epoch end) */
  int n_rec, n_stats, n_own;      /* records; those with the stats; of those, records of device_stats's own */
  int64_t rec_step[32];           /* each stats record's step */
  double rss, peak, cpu, load;    /* the last stats record's */
  int gpu_seen;
} ds_watch;
static void ds_saw(ds_watch *w, hk_ctx *ctx, int epoch_end) {
  const tr_device_stats_state *s = tr_device_stats_get(w->reg, w->h);
  if (s->readings != w->last && w->n_read < 32) w->read_at[w->n_read++] = epoch_end ? -1 - ctx->epoch : ctx->global_step;
  w->last = s->readings;
}
static hk_signal ds_batch_end(hk_ctx *ctx, void *u) { ds_saw((ds_watch *)u, ctx, 0); return HK_CONTINUE; }
static hk_signal ds_epoch_end(hk_ctx *ctx, void *u) { ds_saw((ds_watch *)u, ctx, 1); return HK_CONTINUE; }
static hk_signal ds_record(hk_ctx *ctx, void *u) { /* after device_stats's on_log: what the loggers get */
  ds_watch *w = (ds_watch *)u;
  tr_log_record *r = tr_log_current(ctx);
  double v;
  if (!r) return HK_CONTINUE;
  w->n_rec++;
  w->gpu_seen += tr_log_get(r, "device_stats/gpu_util_percent", &v) + tr_log_get(r, "device_stats/gpu_mem_used_mb", &v);
  if (!tr_log_get(r, "device_stats/rss_mb", &w->rss)) return HK_CONTINUE;
  assert_true(tr_log_get(r, "device_stats/peak_rss_mb", &w->peak));
  assert_true(tr_log_get(r, "device_stats/load_1m", &w->load));
  w->cpu = tr_log_get(r, "device_stats/cpu_percent", &v) ? v : NAN;
  assert_true(w->rss > 0 && w->peak >= w->rss && w->load >= 0 && w->peak < 1e6); /* MB: a test uses far less than a TB */
  assert_true(isnan(w->cpu) || w->cpu >= 0);
  w->n_own += !tr_log_get(r, "train/loss", &v);
  if (w->n_stats < 32) w->rec_step[w->n_stats] = r->step;
  w->n_stats++;
  return HK_CONTINUE;
}
static void ds_watch_on(ds_watch *w, hk_registry *reg, hk_handle h) {
  hk_opts o = { .monitor = 1, .order = 1 << 20 };
  memset(w, 0, sizeof *w);
  w->reg = reg;
  w->h = h;
  o.name = "ds_batch_end";
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_BATCH_END, ds_batch_end, w, &o, NULL), HK_OK);
  o.name = "ds_epoch_end";
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_EPOCH_END, ds_epoch_end, w, &o, NULL), HK_OK);
  o.name = "ds_record";
  assert_int_equal(hk_on(reg, HK_ON_LOG, ds_record, w, &o, NULL), HK_OK);
}
/* A loop of your own (tr_run_begin .. tr_run_end): steps (epochs TR_NO, max_steps) or epochs of 4 batches */
static void ds_own_loop(const char *spec, int epochs, int64_t steps, int64_t log_every, ds_watch *w) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx *ctx;
  int what;
  ctx = tr_run_begin(reg, &(tr_run_desc){ .epochs = epochs ? 0 : TR_NO, .max_epochs = epochs, .max_steps = epochs ? 0 : steps,
                                          .train_batches = 4, .log_every_n_steps = log_every, .lr = 0.1, .validation = TR_NO,
                                          .no_signals = 1, .spec = spec }, NULL);
  ds_watch_on(w, reg, hk_spec_find(reg, "device_stats", 0));
  while ((what = tr_run_next(reg))) {
    ctx->loss = 1.0 / (double)(ctx->global_step + 1);
    (void)tr_run_update(reg);
  }
  assert_int_equal(tr_run_end(reg), TR_OK);
  hk_destroy(reg);
}
static void test_device_stats_own_loop(void **state) {
  ds_watch w;
  (void)state;
  /* the run's cadence (4): read at steps 4, 8, 12, riding in the run's training records (steps 3, 7, 11) */
  ds_own_loop("device_stats", 0, 12, 4, &w);
  assert_int_equal(w.n_read, 3);
  assert_true(w.read_at[0] == 4 && w.read_at[1] == 8 && w.read_at[2] == 12);
  assert_int_equal(w.n_rec, 3);
  assert_int_equal(w.n_stats, 3);
  assert_int_equal(w.n_own, 0);
  assert_true(w.rec_step[0] == 3 && w.rec_step[1] == 7 && w.rec_step[2] == 11);
  assert_false(isnan(w.cpu)); /* an interval since on_train_start */
  assert_int_equal(w.gpu_seen, 0); /* no TRAIN_CUDA: no GPU metric */
  /* every 3 steps, records every 4: steps 3, 6, 9 in records of their own, 12 in the run's; the run's records at
     4 and 8 do not carry the stats read before them */
  ds_own_loop("device_stats(every_n_steps=3)", 0, 12, 4, &w);
  assert_int_equal(w.n_read, 4);
  assert_true(w.read_at[0] == 3 && w.read_at[1] == 6 && w.read_at[2] == 9 && w.read_at[3] == 12);
  assert_int_equal(w.n_rec, 3 + 3);
  assert_int_equal(w.n_stats, 4);
  assert_int_equal(w.n_own, 3);
  assert_true(w.rec_step[0] == 2 && w.rec_step[1] == 5 && w.rec_step[2] == 8 && w.rec_step[3] == 11);
  /* no logger and no cadence of the run: read all the same (metrics for hooks) */
  ds_own_loop("device_stats(every_n_steps=5)", 0, 12, -1, &w);
  assert_int_equal(w.n_read, 2);
  assert_true(w.read_at[0] == 5 && w.read_at[1] == 10);
  assert_int_equal(w.n_stats, 2);
  assert_int_equal(w.n_own, 2);
}
static void test_device_stats_epoch_loop(void **state) {
  ds_watch w;
  (void)state;
  /* epochs only: at each epoch's end (2 epochs of 4 batches), records of their own at the epoch's last step */
  ds_own_loop("device_stats(every_n_steps=-1, on_epoch_end=true)", 2, 0, 3, &w);
  assert_int_equal(w.n_read, 2);
  assert_true(w.read_at[0] == -1 && w.read_at[1] == -2);
  assert_int_equal(w.n_stats, 2);
  assert_int_equal(w.n_own, 2);
  assert_true(w.rec_step[0] == 3 && w.rec_step[1] == 7);
  assert_int_equal(w.n_rec, 2 + 2); /* the run's records at steps 3 and 6 (global 3, 6) carry none */
  /* steps and epoch ends: 2, 4 | end 0 | 6, 8 | end 1 */
  ds_own_loop("device_stats(every_n_steps=2, on_epoch_end=true)", 2, 0, 2, &w);
  assert_int_equal(w.n_read, 6);
  assert_true(w.read_at[0] == 2 && w.read_at[1] == 4 && w.read_at[2] == -1 && w.read_at[3] == 6 && w.read_at[4] == 8 &&
              w.read_at[5] == -2);
  assert_int_equal(w.n_stats, 6);
  assert_int_equal(w.n_own, 2);
}
/* tr_fit, from a spec; the metrics for hooks; bad parameters */
static void test_device_stats_fit(void **state) {
  lin m;
  tr_trainer t;
  tr_config c = lin_cfg(2);
  ds_watch w;
  hk_handle h;
  const tr_device_stats_state *s;
  double v;
  (void)state;
  lin_init(&m, &t, TR_OPTIM_SGD, 0.01);
  c.log_every_n_steps = 2;
  assert_int_equal(hk_spec_apply(t.reg, "device_stats(on_epoch_end=true)"), HK_OK);
  h = hk_spec_find(t.reg, "device_stats", 0);
  ds_watch_on(&w, t.reg, h);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  s = tr_device_stats_get(t.reg, h);
  assert_int_equal(s->readings, 2 * NBATCH / 2 + 2);
  assert_int_equal(w.n_read, 6);
  assert_true(w.read_at[0] == 2 && w.read_at[1] == 4 && w.read_at[2] == -1 && w.read_at[3] == 6 && w.read_at[4] == 8 &&
              w.read_at[5] == -2);
  assert_int_equal(w.n_stats, 6);
  assert_int_equal(w.n_own, 2);
  assert_int_equal(s->step, 2 * NBATCH);
  assert_true(s->rss_mb > 0 && s->peak_rss_mb >= s->rss_mb && s->load_1m >= 0 && s->cpu_percent >= 0);
  assert_true(isnan(s->gpu_util_percent) && isnan(s->gpu_mem_used_mb) && isnan(s->gpu_mem_total_mb) && s->gpu == 0);
  assert_true(hk_metric_get(&t.ctx, "device_stats/rss_mb", &v) && v == s->rss_mb);
  assert_false(hk_metric_get(&t.ctx, "device_stats/gpu_util_percent", &v));
  assert_null(strstr(lin_logtext(&m), "device_stats"));
  expect_bad(&t, tr_device_stats(t.reg, &(tr_device_stats_desc){ .every_n_steps = -1 }, NULL), "it would read nothing");
  expect_bad_spec(&t, "device_stats(every_n_steps=-2, on_epoch_end=false)", "every_n_steps is -2 (never on steps)");
  assert_null(tr_device_stats_get(t.reg, hk_spec_find(t.reg, "timer", 0)));
  lin_free(&m, &t);
}

/* the spec-only parameter: progress_bar's stream is the desc's out */
static void test_spec_only_stream(void **state) {
  hk_registry *reg = hk_create(NULL);
  (void)state;
  assert_int_equal(tr_add_factories(reg), HK_OK);
  assert_int_equal(hk_spec_apply(reg, "progress_bar(stream=stderr)"), HK_OK);
  assert_ptr_equal(((tr__bar *)hk_callback_get(reg, hk_spec_find(reg, "progress_bar", 0))->user)->out, stderr);
  hk_destroy(reg);
}
#endif /* NAN_GUARD_ONLY */

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_nan_guard_fail),
    cmocka_unit_test(test_nan_guard_fail_names_once),
    cmocka_unit_test(test_nan_guard_skip_and_stop),
    cmocka_unit_test(test_nan_guard_own_loop),
    cmocka_unit_test(test_nan_guard_stop_skips_step),
#ifndef NAN_GUARD_ONLY
    cmocka_unit_test(test_lr_monitor),
    cmocka_unit_test(test_lr_monitor_every_row),
    cmocka_unit_test(test_lr_monitor_groups),
    cmocka_unit_test(test_gradient_monitor_fit),
    cmocka_unit_test(test_gradient_monitor_values),
    cmocka_unit_test(test_gradient_monitor_views_checked),
    cmocka_unit_test(test_grad_pass_shared),
    cmocka_unit_test(test_gradient_monitor_percentiles),
    cmocka_unit_test(test_ema),
    cmocka_unit_test(test_lr_finder),
    cmocka_unit_test(test_model_summary),
    cmocka_unit_test(test_accumulation_scheduler),
    cmocka_unit_test(test_accumulation_scheduler_grammar),
    cmocka_unit_test(test_profiler_fit),
    cmocka_unit_test(test_profiler_slow_hook),
    cmocka_unit_test(test_profiler_own_loop_failing),
    cmocka_unit_test(test_throughput_monitor),
    cmocka_unit_test(test_throughput_monitor_fit),
    cmocka_unit_test(test_throughput_monitor_batch_size_warning),
    cmocka_unit_test(test_profiler_throughput_bad_parameters),
    cmocka_unit_test(test_bad_parameters),
    cmocka_unit_test(test_exact_resume_all),
    cmocka_unit_test(test_exact_resume_all_mid_epoch),
    cmocka_unit_test(test_spec_desc_agree),
    cmocka_unit_test(test_spec_only_stream),
    cmocka_unit_test(test_on_exception_checkpoint_resume),
    cmocka_unit_test(test_on_exception_checkpoint_when),
    cmocka_unit_test(test_on_exception_checkpoint_save_error),
    cmocka_unit_test(test_on_exception_checkpoint_own_loop),
    cmocka_unit_test(test_on_exception_checkpoint_default_dir),
    cmocka_unit_test(test_late_grads_own_loop),
    cmocka_unit_test(test_late_grads_never_set),
    cmocka_unit_test(test_spike_detection_own_loop),
    cmocka_unit_test(test_spike_detection_rollback_exact),
    cmocka_unit_test(test_spike_detection_grads_and_limit),
    cmocka_unit_test(test_rescue_bad_parameters),
    cmocka_unit_test(test_device_stats_own_loop),
    cmocka_unit_test(test_device_stats_epoch_loop),
    cmocka_unit_test(test_device_stats_fit),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
