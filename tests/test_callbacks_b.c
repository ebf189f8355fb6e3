/* tests/test_callbacks_b.c - train.h's standard callbacks lr_monitor, gradient_monitor, nan_guard, ema,
   lr_finder, model_summary and accumulation_scheduler: exact values on a small linear model (its
   gradients computed by hand here), the hand-written-loop contract, bad parameters (constructor and
   spec string), and exact resume with all of them registered (with early_stopping and
   model_checkpoint). Built also with -ffast-math (-DNAN_GUARD_ONLY): nan_guard must still fire. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
#include <cmocka.h>
#ifdef __cplusplus
}
#endif

#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
  FILE *log;
  char *log_buf;
  size_t log_len;
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
  tr_desc d;
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
  m->log = open_memstream(&m->log_buf, &m->log_len);
  m->t = t;
  memset(&d, 0, sizeof d);
  d.model.params = m->p;
  d.model.grads = m->g;
  d.model.n_params = 4;
  d.model.tensors = lin_tensors;
  d.model.n_tensors = 2;
  d.model.user = m;
  d.model.forward = lin_forward;
  d.model.backward = lin_backward;
  d.optim.kind = kind;
  d.optim.lr = lr;
  d.optim.momentum = kind == TR_OPTIM_SGD ? 0.5 : 0;
  d.optim.weight_decay = 0.01;
  d.seed = 11;
  d.log = m->log;
  assert_int_equal(tr_init(t, &d), TR_OK);
  memset(&g_train, 0, sizeof g_train);
  g_train.count = lin_count;
  g_train.get = lin_get;
  g_train.user = m;
  g_val = g_train;
}
static const char *lin_logtext(lin *m) { fflush(m->log); return m->log_buf ? m->log_buf : ""; }
static void lin_free(lin *m, tr_trainer *t) {
  tr_free(t);
  fclose(m->log);
  free(m->log_buf);
}
static tr_config lin_cfg(int64_t max_epochs) {
  tr_config c;
  memset(&c, 0, sizeof c);
  c.train = &g_train;
  c.val = &g_val;
  c.max_epochs = max_epochs;
  c.no_sigint = 1;
  return c;
}

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
static void expect_bad(tr_trainer *t, tr_err e, const char *needle) {
  assert_int_equal(e, TR_ERR_INVALID);
  if (!strstr(hk_last_error(t->reg), needle)) fail_msg("error '%s' lacks '%s'", hk_last_error(t->reg), needle);
}
static void expect_bad_spec(tr_trainer *t, const char *spec, const char *needle) {
  assert_int_not_equal(hk_spec_apply(t->reg, spec), HK_OK);
  if (!strstr(hk_last_error(t->reg), needle)) fail_msg("spec '%s': error '%s' lacks '%s'", spec, hk_last_error(t->reg), needle);
}

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
#endif /* NAN_GUARD_ONLY */

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_nan_guard_fail),
    cmocka_unit_test(test_nan_guard_skip_and_stop),
    cmocka_unit_test(test_nan_guard_own_loop),
    cmocka_unit_test(test_nan_guard_stop_skips_step),
#ifndef NAN_GUARD_ONLY
    cmocka_unit_test(test_lr_monitor),
    cmocka_unit_test(test_gradient_monitor_fit),
    cmocka_unit_test(test_gradient_monitor_values),
    cmocka_unit_test(test_gradient_monitor_percentiles),
    cmocka_unit_test(test_ema),
    cmocka_unit_test(test_lr_finder),
    cmocka_unit_test(test_model_summary),
    cmocka_unit_test(test_accumulation_scheduler),
    cmocka_unit_test(test_accumulation_scheduler_grammar),
    cmocka_unit_test(test_bad_parameters),
    cmocka_unit_test(test_exact_resume_all),
    cmocka_unit_test(test_exact_resume_all_mid_epoch),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
