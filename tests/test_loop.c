/* tests/test_loop.c - the loop API of issue 36 (tr_run_begin / tr_run_next / tr_run_update / tr_run_end, TR_VIEWS,
   TR_TENSORS, tr_views) driving a small deterministic model of its own (3 weights, SGD with momentum, random-access
   data), in both shapes:
     step   llm.c's shape: epochs = TR_NO, max_steps 14, a validation every 4 steps
     epoch  4 epochs of 5 batches, a validation at every epoch's end and every 4 steps (4, 8, 12, 16: 20 is both)

   cmocka tests:
     a. Ctrl-C (raise(SIGINT) in-process, the run's own handler) at every point of issue 36's item 3, in both shapes:
        inside a training batch; after a batch, before its validation / at on_train_epoch_end (between the epoch's
        last batch and its end); inside a validation batch (an epoch's end validation and one every N steps); inside
        a checkpoint write (save_model, a hook of on_save_checkpoint); inside tr_run_end (on_train_end). Every
        checkpoint the interrupted run leaves (tr_run_desc.save_to, on_exception_checkpoint's file, model_checkpoint's
        last.ckpt), resumed with a fresh registry to the end, gives the uninterrupted run's bits (weights, momentum,
        global_step; a checkpoint of a finished run is read back with tr_run_load instead).
     b. the silent mistakes of issue 36's item 2, each a clear error: the loop moving ctx->epoch / global_step /
        batch_idx; a hook's tr_lr_scale reaches ctx->lr; a HK_FAIL at a site fired with plain HK_FIRE (also with the
        old calls: tr_run_start + tr_run_batch_end with a flow the site did not use); a load_model reading too little
        or too much (tr_run_load, and a resume through tr_run_begin); a view count beyond the array; TR_VIEWS /
        TR_TENSORS counting; log_every_n_steps beyond the run (warned once, only when a logger listens); a training
        batch without tr_run_update, tr_run_update twice, or in a validation batch; a failed run says why once in
        the run's log; nothing registered: no SIGINT handler, nothing printed; late buffers (tr_views with base NULL,
        TR_TENSORS with a gradient buffer allocated in the first backward) seen by the batteries.
     c. hooks that change the run, in both shapes: tr_lr_scale halves the lr from the next step on;
        hk_request_checkpoint saves at that step; accumulate_grad_batches = 2 steps every 2nd batch.
     d. model_checkpoint's retention (keep_last_n, keep_every_n) in both shapes; in the epoch shape resume_from "auto"
        after SIGKILLs at given steps (a forked child) ends as the uninterrupted run, bit for bit.
   Cost: about 60 short runs of a 3-weight model; well under a second plain. */
#define TEST_NO_FSYNC /* what it checks needs no flush to the disk (tests/test.h) */
#include "test.h"

#include <dirent.h>
#include <fcntl.h>

static char g_root[256];

static int exists(const char *path) { struct stat st; return stat(path, &st) == 0; }
static int copy_file(const char *from, const char *to) {
  char *p;
  FILE *f, *in = fopen(from, "rb");
  long n;
  int ok;
  if (!in) return -1;
  fseek(in, 0, SEEK_END);
  n = ftell(in);
  fseek(in, 0, SEEK_SET);
  p = (char *)malloc((size_t)n + 1);
  ok = fread(p, 1, (size_t)n, in) == (size_t)n;
  fclose(in);
  if (!ok || !(f = fopen(to, "wb"))) { free(p); return -1; }
  ok = fwrite(p, 1, (size_t)n, f) == (size_t)n;
  free(p);
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* ---- the model: y = w.x, squared loss, SGD with momentum; data by index (random access) ----------------------- */
enum { NP = 3, BS = 4, NB = 5 };
typedef struct model { float w[NP], g[NP], m[NP]; } model;
static model M;
static int g_load_mode;   /* 0: load_model reads what save_model wrote; -1: 4 bytes too few; +1: 4 too many */
static int g_save_raise;  /* > 0: save_model raises SIGINT once the checkpoint's step is at least this */
static int64_t g_save_step; /* the step of the save in progress (ctx->global_step of the run, set by the loop) */
static int g_raised;      /* a test raises Ctrl-C once per run (a second one would end the process) */

static void ctrl_c(void) { if (!g_raised) { g_raised = 1; raise(SIGINT); } }
static float xval(int64_t i, int j) { return (float)(((i * 7 + j * 13) % 11) - 5) / 5.0f; }
static float yval(int64_t i) { return 0.7f * xval(i, 0) - 0.4f * xval(i, 1) + 0.2f * xval(i, 2) + (float)(i % 3) * 0.05f; }
static float batch_loss(int64_t k, int grad) { /* samples k*BS .. k*BS+BS-1 */
  float loss = 0;
  int i, j;
  if (grad) memset(M.g, 0, sizeof M.g);
  for (i = 0; i < BS; i++) {
    int64_t s = k * BS + i;
    float z = 0, e;
    for (j = 0; j < NP; j++) z += M.w[j] * xval(s, j);
    e = z - yval(s);
    loss += e * e / BS;
    for (j = 0; grad && j < NP; j++) M.g[j] += 2 * e * xval(s, j) / BS;
  }
  return loss;
}
static void sgd(double lr) {
  int j;
  for (j = 0; j < NP; j++) {
    M.m[j] = 0.9f * M.m[j] + M.g[j];
    M.w[j] -= (float)lr * M.m[j];
  }
}
static void model_init(void) {
  memset(&M, 0, sizeof M);
  M.w[0] = 0.5f, M.w[1] = -0.25f, M.w[2] = 0.1f;
}
static int save_model(void *u, FILE *f) {
  (void)u;
  if (g_save_raise > 0 && g_save_step >= g_save_raise) ctrl_c(); /* Ctrl-C inside a checkpoint write */
  return fwrite("TLP1", 4, 1, f) + fwrite(M.w, sizeof M.w, 1, f) + fwrite(M.m, sizeof M.m, 1, f) != 3;
}
static int load_model(void *u, FILE *f) {
  char tag[4], extra[4];
  (void)u;
  if (fread(tag, 4, 1, f) + fread(M.w, sizeof M.w, 1, f) != 2 || memcmp(tag, "TLP1", 4)) return 1;
  if (g_load_mode < 0) return fread(M.m, sizeof M.m - 4, 1, f) != 1; /* forgets the last momentum */
  if (fread(M.m, sizeof M.m, 1, f) != 1) return 1;
  if (g_load_mode > 0) return fread(extra, sizeof extra, 1, f) != 1; /* reads into what follows */
  return 0;
}

/* ---- the two shapes, with a Ctrl-C at one point -------------------------------------------------------------- */
enum { SHAPE_STEP, SHAPE_EPOCH };
enum { P_NONE, P_TRAIN_BATCH, P_BATCH_END, P_EPOCH_END, P_VAL_BATCH, P_SAVE_MODEL, P_ON_SAVE, P_TRAIN_END };
static const char *const point_names[] = { "none", "train batch", "on_train_batch_end", "on_train_epoch_end",
                                           "validation batch", "save_model", "on_save_checkpoint", "on_train_end" };
typedef struct cfg {
  int shape, point;
  int64_t at;              /* the step (the epoch for P_EPOCH_END) where the Ctrl-C comes */
  const char *dir;         /* the run's directory */
  const char *resume;
} cfg;
typedef struct result {
  tr_err e;
  float w[NP], m[NP];
  int64_t step, epoch;
  char error[600];
} result;
static const cfg *g_cfg;

static hk_signal sig_batch_end(hk_ctx *ctx, void *u) { (void)u; if (ctx->global_step == g_cfg->at) ctrl_c(); return HK_CONTINUE; }
static hk_signal sig_epoch_end(hk_ctx *ctx, void *u) { (void)u; if (ctx->epoch == g_cfg->at) ctrl_c(); return HK_CONTINUE; }
static hk_signal sig_on_save(hk_ctx *ctx, void *u) { (void)u; if (ctx->global_step >= g_cfg->at) ctrl_c(); return HK_CONTINUE; }
static hk_signal sig_train_end(hk_ctx *ctx, void *u) { (void)ctx, (void)u; ctrl_c(); return HK_CONTINUE; }
static hk_signal note_step(hk_ctx *ctx, void *u) { (void)u; g_save_step = ctx->global_step; return HK_CONTINUE; }

static tr_run_desc shape_desc(int shape) {
  tr_run_desc d;
  memset(&d, 0, sizeof d);
  d.lr = 0.05;
  d.val_batches = 2;
  d.val_every_n_steps = 4;
  d.save_model = save_model;
  d.load_model = load_model;
  d.no_resume_message = 1;
  if (shape == SHAPE_STEP) d.epochs = TR_NO, d.max_steps = 14;
  else d.max_epochs = 4, d.train_batches = NB;
  return d;
}
static tr_err run_cfg(const cfg *c, result *out) {
  hk_registry *reg = hk_create(NULL);
  hk_tensor pv[] = { { "w", M.w, NP, 0 } }, gv[] = { { "w", M.g, NP, 0 } };
  tr_run_desc d = shape_desc(c->shape);
  char spec[1500], save_to[400], logp[400];
  FILE *log;
  hk_ctx *ctx;
  int what;
  model_init();
  g_cfg = c;
  g_raised = 0;
  g_save_raise = c->point == P_SAVE_MODEL ? (int)c->at : 0;
  g_save_step = 0;
  mkdir(c->dir, 0755);
  snprintf(save_to, sizeof save_to, "%s/interrupted.ckpt", c->dir);
  snprintf(logp, sizeof logp, "%s/log.txt", c->dir);
  assert_non_null(log = fopen(logp, "a"));
  snprintf(spec, sizeof spec, "model_checkpoint(dirpath=\"%s/ck\", monitor=val/loss, save_top_k=1, save_last=true); "
           "on_exception_checkpoint(dirpath=\"%s/oec\"); early_stopping(monitor=val/loss, patience=100)", c->dir, c->dir);
  d.params = pv, d.grads = gv, d.n_tensors = 1;
  d.save_to = save_to;
  d.log = log;
  d.spec = spec;
  d.model_user = NULL;
  /* the step of the save in progress, for save_model (it has no ctx): every event that may save notes it */
  assert_int_equal(hk_on(reg, HK_ON_SAVE_CHECKPOINT, note_step, NULL, &(hk_opts){ .order = -100 }, NULL), HK_OK);
  if (c->point == P_BATCH_END) assert_int_equal(hk_on(reg, HK_ON_TRAIN_BATCH_END, sig_batch_end, NULL, NULL, NULL), HK_OK);
  if (c->point == P_EPOCH_END) assert_int_equal(hk_on(reg, HK_ON_TRAIN_EPOCH_END, sig_epoch_end, NULL, NULL, NULL), HK_OK);
  if (c->point == P_ON_SAVE) assert_int_equal(hk_on(reg, HK_ON_SAVE_CHECKPOINT, sig_on_save, NULL, NULL, NULL), HK_OK);
  if (c->point == P_TRAIN_END) assert_int_equal(hk_on(reg, HK_ON_TRAIN_END, sig_train_end, NULL, NULL, NULL), HK_OK);
  ctx = tr_run_begin(reg, &d, c->resume);
  assert_non_null(ctx);
  while ((what = tr_run_next(reg)) != 0) {
    g_save_step = ctx->global_step;
    if (what == TR_RUN_VAL_BATCH) {
      if (c->point == P_VAL_BATCH && ctx->global_step == c->at && ctx->batch_idx == 1) ctrl_c();
      ctx->loss = batch_loss(1000 + ctx->batch_idx, 0);
      continue;
    }
    assert_int_equal(what, TR_RUN_TRAIN);
    if (c->point == P_TRAIN_BATCH && ctx->global_step == c->at) ctrl_c();
    ctx->loss = batch_loss(c->shape == SHAPE_STEP ? ctx->global_step : ctx->epoch * 17 + ctx->batch_idx, 1);
    HK_FIRE(reg, HK_ON_BEFORE_BACKWARD, ctx);
    HK_FIRE(reg, HK_ON_AFTER_BACKWARD, ctx);
    HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, ctx);
    if (tr_run_update(reg)) sgd(ctx->lr);
    g_save_step = ctx->global_step;
  }
  g_save_step = ctx->global_step;
  out->e = tr_run_end(reg);
  memcpy(out->w, M.w, sizeof M.w);
  memcpy(out->m, M.m, sizeof M.m);
  out->step = ctx->global_step;
  out->epoch = ctx->epoch;
  snprintf(out->error, sizeof out->error, "%s", tr_run_error(reg));
  hk_destroy(reg);
  fclose(log);
  g_save_raise = 0;
  return out->e;
}
/* A checkpoint's model and step read back without running (a checkpoint of a finished run cannot be resumed). */
static void read_ckpt(int shape, const char *path, result *out) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  tr_run_desc d = shape_desc(shape);
  FILE *log = tmpfile(); /* (it says the callbacks' states it ignores) */
  memset(&ctx, 0, sizeof ctx);
  model_init();
  d.log = log;
  assert_int_equal(tr_run_setup(reg, &d), TR_OK);
  assert_int_equal(tr_run_load(reg, &ctx, path), TR_OK);
  fclose(log);
  memcpy(out->w, M.w, sizeof M.w);
  memcpy(out->m, M.m, sizeof M.m);
  out->step = ctx.global_step;
  out->epoch = ctx.epoch;
  hk_destroy(reg);
}
static int same_bits(const result *a, const result *b) {
  return !memcmp(a->w, b->w, sizeof a->w) && !memcmp(a->m, b->m, sizeof a->m) && a->step == b->step;
}
static result g_ref[2];
static void reference(int shape) {
  char dir[400];
  cfg c;
  memset(&c, 0, sizeof c);
  snprintf(dir, sizeof dir, "%s/ref_%d", g_root, shape);
  c.shape = shape, c.dir = dir;
  assert_int_equal(run_cfg(&c, &g_ref[shape]), TR_OK);
  assert_int_equal(g_ref[shape].step, shape == SHAPE_STEP ? 14 : 20);
}
/* One interruption: the run ends by Ctrl-C; every checkpoint it leaves resumes to the reference's bits. */
static void interrupt_at(int shape, int point, int64_t at) {
  static const char *const files[] = { "interrupted.ckpt", "oec/on_exception.ckpt", "ck/last.ckpt" };
  char dir[400], path[500], keep[500], rdir[500];
  result r, rr;
  cfg c;
  int i, n = 0;
  if (!g_ref[shape].step) reference(shape);
  memset(&c, 0, sizeof c);
  snprintf(dir, sizeof dir, "%s/s%d_p%d_at%lld", g_root, shape, point, (long long)at);
  c.shape = shape, c.point = point, c.at = at, c.dir = dir;
  run_cfg(&c, &r);
  if (!g_raised) fail_msg("%s shape, %s at %lld: the Ctrl-C never came", shape ? "epoch" : "step", point_names[point], (long long)at);
  if (point != P_TRAIN_END && r.e != TR_ERR_INTERRUPTED)
    fail_msg("%s shape, Ctrl-C in %s at %lld: the run ended %s (%s), not interrupted", shape ? "epoch" : "step",
             point_names[point], (long long)at, tr_err_name(r.e), r.error);
  for (i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    if (!exists(path)) {
      if (i < 2 && r.e == TR_ERR_INTERRUPTED && point != P_TRAIN_END)
        fail_msg("%s shape, Ctrl-C in %s at %lld: no %s", shape ? "epoch" : "step", point_names[point], (long long)at, files[i]);
      continue;
    }
    snprintf(keep, sizeof keep, "%s/keep%d.ckpt", dir, i);
    assert_int_equal(copy_file(path, keep), 0);
  }
  for (i = 0; i < 3; i++) {
    cfg rc;
    snprintf(keep, sizeof keep, "%s/keep%d.ckpt", dir, i);
    if (!exists(keep)) continue;
    n++;
    snprintf(rdir, sizeof rdir, "%s/resume%d", dir, i);
    memset(&rc, 0, sizeof rc);
    rc.shape = shape, rc.dir = rdir, rc.resume = keep;
    if (run_cfg(&rc, &rr) != TR_OK) {
      if (!strstr(rr.error, "resuming it trains nothing"))
        fail_msg("%s shape, Ctrl-C in %s at %lld: resuming %s failed: %s", shape ? "epoch" : "step", point_names[point],
                 (long long)at, files[i], rr.error);
      read_ckpt(shape, keep, &rr); /* a finished run's checkpoint: its bits are the end's */
    } else if (rr.epoch != g_ref[shape].epoch)
      fail_msg("%s shape, Ctrl-C in %s at %lld: resumed from %s, it ends in epoch %lld, not %lld", shape ? "epoch" : "step",
               point_names[point], (long long)at, files[i], (long long)rr.epoch, (long long)g_ref[shape].epoch);
    if (!same_bits(&rr, &g_ref[shape]))
      fail_msg("%s shape, Ctrl-C in %s at %lld: resumed from %s, it ends at step %lld (epoch %lld) with other bits than the "
               "uninterrupted run (step %lld, epoch %lld; w[0] %a vs %a)", shape ? "epoch" : "step", point_names[point],
               (long long)at, files[i], (long long)rr.step, (long long)rr.epoch, (long long)g_ref[shape].step,
               (long long)g_ref[shape].epoch, (double)rr.w[0], (double)g_ref[shape].w[0]);
  }
  assert_true(n >= 1);
}
static void test_uninterrupted_resumes(void **state) { /* the shapes themselves: last.ckpt of a shorter run resumes exactly */
  (void)state;
  reference(SHAPE_STEP);
  reference(SHAPE_EPOCH);
  assert_int_equal(g_ref[SHAPE_EPOCH].epoch, 4);
}
static void test_ctrl_c_step_train_batch(void **state) { (void)state; interrupt_at(SHAPE_STEP, P_TRAIN_BATCH, 5); }
static void test_ctrl_c_step_before_validation(void **state) { (void)state; interrupt_at(SHAPE_STEP, P_BATCH_END, 8); }
static void test_ctrl_c_step_validation(void **state) { (void)state; interrupt_at(SHAPE_STEP, P_VAL_BATCH, 8); }
static void test_ctrl_c_step_last_validation(void **state) { (void)state; interrupt_at(SHAPE_STEP, P_BATCH_END, 14); }
static void test_ctrl_c_step_save_model(void **state) { (void)state; interrupt_at(SHAPE_STEP, P_SAVE_MODEL, 8); }
static void test_ctrl_c_step_on_save_checkpoint(void **state) { (void)state; interrupt_at(SHAPE_STEP, P_ON_SAVE, 8); }
static void test_ctrl_c_step_train_end(void **state) { (void)state; interrupt_at(SHAPE_STEP, P_TRAIN_END, 0); }
static void test_ctrl_c_epoch_train_batch(void **state) { (void)state; interrupt_at(SHAPE_EPOCH, P_TRAIN_BATCH, 7); }
static void test_ctrl_c_epoch_last_batch(void **state) { (void)state; interrupt_at(SHAPE_EPOCH, P_BATCH_END, 10); }
static void test_ctrl_c_epoch_end(void **state) { (void)state; interrupt_at(SHAPE_EPOCH, P_EPOCH_END, 1); }
static void test_ctrl_c_epoch_end_validation(void **state) { (void)state; interrupt_at(SHAPE_EPOCH, P_VAL_BATCH, 10); }
static void test_ctrl_c_epoch_step_validation(void **state) { (void)state; interrupt_at(SHAPE_EPOCH, P_VAL_BATCH, 8); }
static void test_ctrl_c_epoch_save_model(void **state) { (void)state; interrupt_at(SHAPE_EPOCH, P_SAVE_MODEL, 10); }
static void test_ctrl_c_epoch_on_save_checkpoint(void **state) { (void)state; interrupt_at(SHAPE_EPOCH, P_ON_SAVE, 10); }
static void test_ctrl_c_epoch_train_end(void **state) { (void)state; interrupt_at(SHAPE_EPOCH, P_TRAIN_END, 0); }

/* ---- b. the silent mistakes: a loop of its own with one mistake ----------------------------------------------- */
enum { MS_NONE, MS_EPOCH, MS_STEP, MS_BATCH, MS_NO_UPDATE, MS_UPDATE_TWICE, MS_UPDATE_IN_VAL, MS_NAN };
typedef struct mini {
  hk_registry *reg;
  hk_ctx *ctx;
  FILE *log;
  tr_err e;
  int64_t trains, vals, updates;
  double lr_seen[32];      /* ctx->lr at every training batch (by global_step) */
  int64_t steps_at[32];    /* tr_run_update's answer per training batch */
} mini;
static void mini_open(mini *r) {
  memset(r, 0, sizeof *r);
  r->reg = hk_create(NULL);
  r->log = tmpfile();
  assert_non_null(r->log);
}
/* The loop: mistake at global_step 2 (or in the first validation batch). */
static tr_err mini_run(mini *r, tr_run_desc d, const char *resume, int mistake) {
  hk_tensor pv[] = { { "w", M.w, NP, 0 } }, gv[] = { { "w", M.g, NP, 0 } };
  int what;
  if (!d.params && !d.param_memory) d.params = pv, d.grads = gv, d.n_tensors = 1;
  if (!d.log) d.log = r->log;
  d.save_model = save_model, d.load_model = load_model;
  if (!resume) model_init();
  r->ctx = tr_run_begin(r->reg, &d, resume);
  assert_non_null(r->ctx);
  while ((what = tr_run_next(r->reg)) != 0) {
    hk_ctx *ctx = r->ctx;
    if (what == TR_RUN_VAL_BATCH) {
      r->vals++;
      ctx->loss = batch_loss(1000 + ctx->batch_idx, 0);
      if (mistake == MS_UPDATE_IN_VAL) (void)tr_run_update(r->reg);
      continue;
    }
    r->trains++;
    if (ctx->global_step < 32) r->lr_seen[ctx->global_step] = ctx->lr;
    ctx->loss = mistake == MS_NAN && ctx->global_step == 2 ? NAN : batch_loss(ctx->global_step, 1);
    HK_FIRE(r->reg, HK_ON_BEFORE_BACKWARD, ctx);
    HK_FIRE(r->reg, HK_ON_AFTER_BACKWARD, ctx);
    HK_FIRE(r->reg, HK_ON_BEFORE_OPTIMIZER_STEP, ctx);
    if (ctx->global_step == 2 && mistake == MS_EPOCH) ctx->epoch++;
    if (ctx->global_step == 2 && mistake == MS_BATCH) ctx->batch_idx += 3;
    if (ctx->global_step == 2 && mistake == MS_NO_UPDATE) continue;
    if (r->trains < 32) r->steps_at[r->trains - 1] = 0;
    if (tr_run_update(r->reg)) {
      r->updates++;
      if (r->trains < 32) r->steps_at[r->trains - 1] = 1;
      sgd(ctx->lr);
      if (ctx->global_step == 3 && mistake == MS_STEP) ctx->global_step = 2; /* "my optimizer's t is 0-based" */
    }
    if (ctx->global_step == 2 && mistake == MS_UPDATE_TWICE) (void)tr_run_update(r->reg);
  }
  return r->e = tr_run_end(r->reg);
}
static char *mini_log(mini *r) {
  long n;
  char *p;
  fflush(r->log);
  n = ftell(r->log);
  p = (char *)malloc((size_t)n + 1);
  rewind(r->log);
  if (fread(p, 1, (size_t)n, r->log) != (size_t)n) n = 0;
  p[n] = 0;
  fseek(r->log, 0, SEEK_END);
  return p;
}
/* The run's log says what times times (else the test fails, showing the log). */
static void assert_log_says(mini *r, const char *what, int times) {
  char *log = mini_log(r);
  int n = count_of(log, what);
  if (n != times) fail_msg("the run's log says '%s' %d times, not %d: %s", what, n, times, log);
  free(log);
}
static void mini_close(mini *r) {
  hk_destroy(r->reg);
  fclose(r->log);
}
static tr_run_desc step_desc(int64_t max_steps) {
  tr_run_desc d;
  memset(&d, 0, sizeof d);
  d.epochs = TR_NO, d.max_steps = max_steps, d.lr = 0.1, d.val_every_n_steps = 3, d.val_batches = 2;
  return d;
}
static tr_run_desc epoch_desc(int64_t max_epochs) {
  tr_run_desc d;
  memset(&d, 0, sizeof d);
  d.max_epochs = max_epochs, d.train_batches = NB, d.lr = 0.1, d.val_batches = 2;
  return d;
}
/* The loop fails with TR_ERR_INVALID, the message naming what; said once in the run's log. */
static void expect_mistake(int mistake, const char *what) {
  mini r;
  mini_open(&r);
  assert_int_equal(mini_run(&r, epoch_desc(2), NULL, mistake), TR_ERR_INVALID);
  if (!strstr(tr_run_error(r.reg), what)) fail_msg("the error does not name '%s': %s", what, tr_run_error(r.reg));
  assert_log_says(&r, what, 1);
  assert_true(r.trains <= NB); /* it stopped there (the first validation is at the epoch's end), not at the end */
  mini_close(&r);
}
static void test_loop_moves_epoch(void **state) { (void)state; expect_mistake(MS_EPOCH, "ctx->epoch"); }
static void test_loop_moves_global_step(void **state) { (void)state; expect_mistake(MS_STEP, "ctx->global_step"); }
static void test_loop_moves_batch_idx(void **state) { (void)state; expect_mistake(MS_BATCH, "ctx->batch_idx"); }
static void test_no_update(void **state) { (void)state; expect_mistake(MS_NO_UPDATE, "without tr_run_update"); }
static void test_update_twice(void **state) { (void)state; expect_mistake(MS_UPDATE_TWICE, "tr_run_update: called twice"); }
static void test_update_in_validation(void **state) { (void)state; expect_mistake(MS_UPDATE_IN_VAL, "in a validation batch"); }

/* a hook's tr_lr_scale takes effect in ctx->lr, from the next step on (c, both shapes) */
static hk_signal halve_at_3(hk_ctx *ctx, void *u) { (void)u; if (ctx->global_step == 3) tr_lr_scale(ctx, 0.5); return HK_CONTINUE; }
static void lr_scale_in(tr_run_desc d) {
  mini r;
  int64_t s;
  mini_open(&r);
  assert_int_equal(hk_on(r.reg, HK_ON_TRAIN_BATCH_END, halve_at_3, NULL, NULL, NULL), HK_OK);
  assert_int_equal(mini_run(&r, d, NULL, MS_NONE), TR_OK);
  for (s = 0; s < 8; s++) /* the batch of step s+1 (global_step s when it begins) */
    if (r.lr_seen[s] != (s < 3 ? 0.1 : 0.05)) fail_msg("the batch after step %lld ran at lr %g", (long long)s, r.lr_seen[s]);
  mini_close(&r);
}
static void test_lr_scale_step_loop(void **state) { (void)state; lr_scale_in(step_desc(8)); }
static void test_lr_scale_epoch_loop(void **state) { (void)state; lr_scale_in(epoch_desc(2)); }
/* with a schedule (sched) and with lr_at, the hook's scale applies on top */
static double lr_at_fn(void *u, const hk_ctx *ctx) { (void)u; return 0.1 + 0.01 * (double)ctx->global_step; }
static void test_lr_scale_on_lr_at(void **state) {
  mini r;
  tr_run_desc d = step_desc(8);
  int64_t s;
  (void)state;
  d.lr_at = lr_at_fn;
  mini_open(&r);
  assert_int_equal(hk_on(r.reg, HK_ON_TRAIN_BATCH_END, halve_at_3, NULL, NULL, NULL), HK_OK);
  assert_int_equal(mini_run(&r, d, NULL, MS_NONE), TR_OK);
  for (s = 0; s < 8; s++)
    assert_true(r.lr_seen[s] == (0.1 + 0.01 * (double)s) * (s < 3 ? 1 : 0.5));
  mini_close(&r);
}

/* a HK_FAIL at a site fired with plain HK_FIRE ends the run with the hook's message */
static hk_signal fail_at_2(hk_ctx *ctx, void *u) {
  (void)u;
  return ctx->global_step == 2 ? hk_fail(ctx, "the model diverged at step %lld", (long long)ctx->global_step) : HK_CONTINUE;
}
static void test_fail_at_plain_fire(void **state) {
  mini r;
  (void)state;
  mini_open(&r);
  assert_int_equal(hk_on(r.reg, HK_ON_BEFORE_OPTIMIZER_STEP, fail_at_2, NULL, NULL, NULL), HK_OK);
  assert_int_equal(mini_run(&r, step_desc(8), NULL, MS_NONE), TR_ERR_HOOK);
  assert_non_null(strstr(tr_run_error(r.reg), "the model diverged at step 2"));
  assert_int_equal(r.updates, 2);   /* the failed batch did not step */
  assert_log_says(&r, "the model diverged at step 2", 1);
  mini_close(&r);
}
/* the old calls: the loop fires with HK_FIRE and gives tr_run_batch_end a flow of its own it never used */
static void test_fail_at_plain_fire_old_calls(void **state) {
  hk_registry *reg = hk_create(NULL);
  hk_tensor pv[] = { { "w", M.w, NP, 0 } }, gv[] = { { "w", M.g, NP, 0 } };
  hk_ctx ctx;
  hk_flow flow = { 0 };
  tr_run_desc d = step_desc(8);
  FILE *log = tmpfile();
  int64_t s;
  tr_err e;
  (void)state;
  memset(&ctx, 0, sizeof ctx);
  ctx.params = pv, ctx.grads = gv, ctx.n_tensors = 1;
  d.val_every_n_steps = 0, d.val_batches = 0, d.log = log;
  model_init();
  assert_int_equal(tr_run_setup(reg, &d), TR_OK);
  assert_int_equal(hk_on(reg, HK_ON_BEFORE_OPTIMIZER_STEP, fail_at_2, NULL, NULL, NULL), HK_OK);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  for (s = 0; s < 8; s++) {
    unsigned next;
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, &ctx, &flow);
    ctx.loss = batch_loss(s, 1);
    HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &ctx);   /* HK_FIRE where HK_FIRE_FLOW was meant */
    if (!HK_FLOW_HAS(&flow, HK_FLOW_SKIP_STEP)) { sgd(0.1); ctx.global_step++; }
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);
    next = tr_run_batch_end(reg, &ctx, &flow);
    hk_flow_clear(&flow, HK_FLOW_BATCH_SIGNALS);
    if (next & TR_RUN_STOP) break;
  }
  e = tr_run_finish(reg, &ctx, TR_OK);
  if (e != TR_ERR_HOOK) fail_msg("the old calls: the run ended %s (%s), after %lld steps", tr_err_name(e), tr_run_error(reg), (long long)s);
  assert_non_null(strstr(tr_run_error(reg), "the model diverged at step 2"));
  assert_int_equal(s, 2);
  hk_destroy(reg);
  fclose(log);
}

/* a load_model that reads too little / too much: an error naming the byte counts */
static void bad_load(int mode) {
  char path[400], want[80];
  mini r;
  hk_ctx ctx;
  tr_err e;
  snprintf(path, sizeof path, "%s/badload.ckpt", g_root);
  mini_open(&r);
  g_load_mode = 0;
  assert_int_equal(mini_run(&r, step_desc(4), NULL, MS_NONE), TR_OK);
  assert_int_equal(tr_run_save(r.reg, r.ctx, path), TR_OK); /* after the run: a save is allowed */
  mini_close(&r);
  /* 4 + 12 + 12 = 28 bytes written */
  snprintf(want, sizeof want, "%d", 28);
  g_load_mode = mode;
  { /* tr_run_load */
    hk_registry *reg = hk_create(NULL);
    tr_run_desc d = step_desc(8);
    d.save_model = save_model, d.load_model = load_model;
    memset(&ctx, 0, sizeof ctx);
    assert_int_equal(tr_run_setup(reg, &d), TR_OK);
    e = tr_run_load(reg, &ctx, path);
    if (e == TR_OK) fail_msg("tr_run_load: a load_model reading %s accepted", mode < 0 ? "too little" : "too much");
    if (!strstr(tr_run_error(reg), "28") || !strstr(tr_run_error(reg), mode < 0 ? "24" : "32"))
      fail_msg("tr_run_load's error does not name the byte counts (28 written, %d read): %s", mode < 0 ? 24 : 32, tr_run_error(reg));
    hk_destroy(reg);
  }
  mini_open(&r); /* a resume through tr_run_begin */
  e = mini_run(&r, step_desc(8), path, MS_NONE);
  if (e == TR_OK) fail_msg("tr_run_begin: a load_model reading %s accepted", mode < 0 ? "too little" : "too much");
  if (!strstr(tr_run_error(r.reg), "28") || !strstr(tr_run_error(r.reg), mode < 0 ? "24" : "32"))
    fail_msg("the resume's error does not name the byte counts: %s", tr_run_error(r.reg));
  assert_int_equal(r.trains, 0);
  mini_close(&r);
  g_load_mode = 0;
}
static void test_load_too_little(void **state) { (void)state; bad_load(-1); }
static void test_load_too_much(void **state) { (void)state; bad_load(1); }

/* a view count beyond the array: refused at setup; TR_VIEWS / TR_TENSORS count the arrays */
static hk_tensor g_pv[8], g_gv[8]; /* zeroed static arrays: the views in the first two */
static void test_view_count_refused(void **state) {
  mini r;
  tr_run_desc d = step_desc(4);
  (void)state;
  g_pv[0] = (hk_tensor){ "w", M.w, 2, 0 }, g_gv[0] = (hk_tensor){ "w", M.g, 2, 0 };
  g_pv[1] = (hk_tensor){ "b", M.w + 2, 1, 0 }, g_gv[1] = (hk_tensor){ "b", M.g + 2, 1, 0 };
  d.params = g_pv, d.grads = g_gv, d.n_tensors = 3; /* by hand: one too many */
  mini_open(&r);
  assert_int_equal(mini_run(&r, d, NULL, MS_NONE), TR_ERR_INVALID);
  assert_int_equal(r.trains, 0);
  if (!strstr(tr_run_error(r.reg), "tensor 2 of 3")) fail_msg("%s", tr_run_error(r.reg));
  assert_log_says(&r, "tensor 2 of 3", 1); /* said once, in the run's log (not on stderr) */
  mini_close(&r);
}
static void test_views_count_arrays(void **state) {
  hk_tensor pv[] = { { "a", M.w, 1, 0 }, { "b", M.w + 1, 2, 0 } }, gv[] = { { "a", M.g, 1, 0 }, { "b", M.g + 1, 2, 0 } };
  static float *pm, *gm;
  static const char *const names[] = { "a", "b", "c" };
  static const size_t sizes[] = { 1, 1, 1 };
  tr_run_desc d1 = { TR_VIEWS(pv, gv) }, d2 = { TR_TENSORS(&pm, &gm, names, sizes) };
  (void)state;
  assert_int_equal(d1.n_tensors, 2);
  assert_ptr_equal(d1.params, pv);
  assert_int_equal(d2.n_tensors, 3);
  assert_ptr_equal(d2.tensor_sizes, sizes);
}

/* log_every_n_steps beyond the run: warned once, only when a logger listens */
static void test_log_every_beyond_run(void **state) {
  char spec[500];
  mini r;
  tr_run_desc d = step_desc(6);
  (void)state;
  d.log_every_n_steps = 50;
  mini_open(&r); /* nothing listens to on_log: nothing said */
  assert_int_equal(mini_run(&r, d, NULL, MS_NONE), TR_OK);
  assert_log_says(&r, "log_every_n_steps", 0);
  mini_close(&r);
  mini_open(&r);
  snprintf(spec, sizeof spec, "csv(save_dir=\"%s/logevery\")", g_root);
  d.spec = spec;
  assert_int_equal(mini_run(&r, d, NULL, MS_NONE), TR_OK);
  assert_log_says(&r, "log_every_n_steps is 50", 1);
  mini_close(&r);
}

/* a failed run says why once in the run's log, whatever the loop prints (nan_guard) */
static void test_failed_run_says_why_once(void **state) {
  mini r;
  tr_run_desc d = step_desc(8);
  (void)state;
  d.spec = "nan_guard";
  mini_open(&r);
  assert_int_equal(mini_run(&r, d, NULL, MS_NAN), TR_ERR_HOOK);
  assert_log_says(&r, "the training loss is nan", 1);
  mini_close(&r);
}

/* nothing registered: no SIGINT handler installed, nothing printed (on stderr either) */
static void test_nothing_registered_quiet(void **state) {
  struct sigaction before, during;
  char path[400], *text;
  int saved, fd;
  hk_registry *reg = hk_create(NULL);
  hk_tensor pv[] = { { "w", M.w, NP, 0 } }, gv[] = { { "w", M.g, NP, 0 } };
  tr_run_desc d = step_desc(4);
  hk_ctx *ctx;
  int what;
  (void)state;
  d.params = pv, d.grads = gv, d.n_tensors = 1, d.save_model = save_model, d.load_model = load_model;
  snprintf(path, sizeof path, "%s/quiet_stderr.txt", g_root);
  fflush(stderr);
  saved = dup(2);
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_true(saved >= 0 && fd >= 0);
  dup2(fd, 2);
  close(fd);
  sigaction(SIGINT, NULL, &before);
  model_init();
  ctx = tr_run_begin(reg, &d, NULL);
  sigaction(SIGINT, NULL, &during);
  while ((what = tr_run_next(reg)) != 0) {
    if (what == TR_RUN_VAL_BATCH) { ctx->loss = batch_loss(1000 + ctx->batch_idx, 0); continue; }
    ctx->loss = batch_loss(ctx->global_step, 1);
    if (tr_run_update(reg)) sgd(ctx->lr);
  }
  assert_int_equal(tr_run_end(reg), TR_OK);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  hk_destroy(reg);
  assert_true(during.sa_handler == before.sa_handler);
  text = slurp(path);
  if (text[0]) fail_msg("a run with nothing registered printed: %s", text);
  free(text);
}

/* late buffers: tr_views with base NULL; TR_TENSORS whose gradient buffer is allocated in the first backward */
static double g_norm_seen[16];
static int g_grad_data_null;
static hk_signal look_grads(hk_ctx *ctx, void *u) {
  (void)u;
  if (!ctx->grads || !ctx->grads[0].data) g_grad_data_null++;
  else if (ctx->global_step < 16) g_norm_seen[ctx->global_step] = hk_grad_norm(ctx);
  return HK_CONTINUE;
}
static void test_tr_views_null_base(void **state) {
  hk_tensor v[3];
  static const char *const names[] = { "a", "b", "c" };
  static const size_t sizes[] = { 2, 3, 4 };
  float buf[9];
  (void)state;
  tr_views(v, NULL, names, sizes, 3);
  assert_null(v[0].data), assert_null(v[2].data);
  assert_int_equal(v[1].count, 3);
  assert_string_equal(v[2].name, "c");
  tr_views(v, buf, names, sizes, 3);
  assert_ptr_equal(v[0].data, buf), assert_ptr_equal(v[1].data, buf + 2), assert_ptr_equal(v[2].data, buf + 5);
}
static void test_late_grad_buffer(void **state) {
  static float *params, *grads; /* llm.c: params_memory at once, grads_memory in the first backward */
  static const char *const names[] = { "w01", "w2" };
  static const size_t sizes[] = { 2, 1 };
  hk_registry *reg = hk_create(NULL);
  tr_run_desc d = step_desc(6);
  FILE *log = tmpfile();
  hk_ctx *ctx;
  char *text;
  int what;
  long n;
  (void)state;
  params = M.w;
  grads = NULL;
  memset(g_norm_seen, 0, sizeof g_norm_seen);
  g_grad_data_null = 0;
  {
    tr_run_desc t = { TR_TENSORS(&params, &grads, names, sizes) };
    d.param_memory = t.param_memory, d.grad_memory = t.grad_memory, d.tensor_names = t.tensor_names;
    d.tensor_sizes = t.tensor_sizes, d.n_tensors = t.n_tensors;
  }
  d.log = log;
  d.spec = "gradient_monitor(log_frequency=1); nan_guard";
  model_init();
  assert_int_equal(hk_on(reg, HK_ON_BEFORE_OPTIMIZER_STEP, look_grads, NULL, NULL, NULL), HK_OK);
  ctx = tr_run_begin(reg, &d, NULL);
  assert_non_null(ctx);
  while ((what = tr_run_next(reg)) != 0) {
    if (what == TR_RUN_VAL_BATCH) { ctx->loss = batch_loss(1000 + ctx->batch_idx, 0); continue; }
    ctx->loss = batch_loss(ctx->global_step, 1);
    HK_FIRE(reg, HK_ON_BEFORE_BACKWARD, ctx);
    if (!grads) grads = M.g;           /* allocated in the first backward */
    HK_FIRE(reg, HK_ON_AFTER_BACKWARD, ctx);
    HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, ctx);
    if (tr_run_update(reg)) sgd(ctx->lr);
  }
  if (tr_run_end(reg) != TR_OK) fail_msg("the run failed: %s", tr_run_error(reg));
  if (g_grad_data_null) fail_msg("%d batches saw no gradient buffer at on_before_optimizer_step", g_grad_data_null);
  assert_true(g_norm_seen[0] > 0 && g_norm_seen[5] > 0);
  assert_ptr_equal(ctx->grads[0].data, M.g);
  assert_ptr_equal(ctx->grads[1].data, M.g + 2);
  assert_ptr_equal(ctx->params[1].data, M.w + 2);
  fflush(log);
  n = ftell(log);
  rewind(log);
  text = (char *)calloc(1, (size_t)n + 1);
  if (fread(text, 1, (size_t)n, log) != (size_t)n) text[0] = 0;
  if (strstr(text, "gradient_monitor")) fail_msg("gradient_monitor complained: %s", text);
  free(text);
  hk_destroy(reg);
  fclose(log);
}

/* ---- c. hooks that change the run --------------------------------------------------------------------------- */
static char g_req_path[400];
static hk_signal request_at_3(hk_ctx *ctx, void *u) {
  (void)u;
  if (ctx->global_step == 3) hk_request_checkpoint(ctx, g_req_path);
  return HK_CONTINUE;
}
static void request_in(int shape) {
  mini r;
  result got;
  (void)got;
  snprintf(g_req_path, sizeof g_req_path, "%s/requested_%d.ckpt", g_root, shape);
  mini_open(&r);
  assert_int_equal(hk_on(r.reg, HK_ON_TRAIN_BATCH_END, request_at_3, NULL, NULL, NULL), HK_OK);
  assert_int_equal(mini_run(&r, shape == SHAPE_STEP ? step_desc(8) : epoch_desc(2), NULL, MS_NONE), TR_OK);
  mini_close(&r);
  assert_true(exists(g_req_path));
  read_ckpt(shape, g_req_path, &got);
  assert_int_equal(got.step, 3);
}
static void test_request_checkpoint_step_loop(void **state) { (void)state; request_in(SHAPE_STEP); }
/* model_checkpoint's retention in a loop of your own (issue 39 item 4): every 2 steps of 14, the 2 newest
   and every 3rd save (steps 6 and 12) kept; the rest removed once newer files are on disk. */
static void test_retention_step_loop(void **state) {
  mini r;
  tr_run_desc d = step_desc(14);
  char spec[600], path[600];
  int64_t step;
  (void)state;
  snprintf(spec, sizeof spec, "model_checkpoint(dirpath=\"%s/retain\", every_n_train_steps=2, keep_last_n=2, keep_every_n=3)", g_root);
  d.spec = spec;
  mini_open(&r);
  assert_int_equal(mini_run(&r, d, NULL, MS_NONE), TR_OK);
  mini_close(&r);
  for (step = 2; step <= 14; step += 2) {
    snprintf(path, sizeof path, "%s/retain/epoch=0-step=%lld.ckpt", g_root, (long long)step);
    if (exists(path) != (step == 6 || step == 12 || step == 14)) fail_msg("step %lld's file: %s", (long long)step, exists(path) ? "kept" : "removed");
  }
}
static void test_request_checkpoint_epoch_loop(void **state) { (void)state; request_in(SHAPE_EPOCH); }

/* model_checkpoint's retention and resume_from "auto" in an epoch loop: 8 epochs of 5 batches, a save at every
   epoch's end, the newest (save_top_k=1, no monitor), the 2 newest (keep_last_n) and every 3rd save for good
   (keep_every_n: epochs 2 and 5) kept, and last.ckpt. The same command (resume "auto") run in a child killed by
   SIGKILL at step 23 (epoch 4) and again at step 33 (epoch 6), then to its end: the files of each moment as
   retention says, and the uninterrupted run's end, bit for bit (weights, momentum, step). No cmocka call in a
   child (a failed one would go on with the suite there): a child exits 2 when its run did not end by the kill. */
static tr_err auto_loop(const char *dir, int64_t kill_at, result *out) {
  hk_registry *reg = hk_create(NULL);
  hk_tensor pv[] = { { "w", M.w, NP, 0 } }, gv[] = { { "w", M.g, NP, 0 } };
  tr_run_desc d = epoch_desc(8);
  char spec[600], logp[400];
  FILE *log;
  hk_ctx *ctx;
  int what;
  tr_err e;
  model_init();
  snprintf(logp, sizeof logp, "%s/log.txt", dir);
  snprintf(spec, sizeof spec, "model_checkpoint(dirpath=\"%s/ck\", save_top_k=1, keep_last_n=2, keep_every_n=3, save_last=true)", dir);
  if (!reg || !(log = fopen(logp, "a"))) return TR_ERR_IO;
  d.lr = 0.05;
  d.params = pv, d.grads = gv, d.n_tensors = 1;
  d.save_model = save_model, d.load_model = load_model;
  d.log = log;
  d.spec = spec;
  ctx = tr_run_begin(reg, &d, "auto");
  while (ctx && (what = tr_run_next(reg)) != 0) {
    if (what == TR_RUN_VAL_BATCH) { ctx->loss = batch_loss(1000 + ctx->batch_idx, 0); continue; }
    if (ctx->global_step == kill_at) raise(SIGKILL); /* as if the machine went away now */
    ctx->loss = batch_loss(ctx->epoch * 17 + ctx->batch_idx, 1);
    HK_FIRE(reg, HK_ON_BEFORE_BACKWARD, ctx);
    HK_FIRE(reg, HK_ON_AFTER_BACKWARD, ctx);
    HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, ctx);
    if (tr_run_update(reg)) sgd(ctx->lr);
  }
  e = tr_run_end(reg);
  memcpy(out->w, M.w, sizeof M.w);
  memcpy(out->m, M.m, sizeof M.m);
  out->step = ctx ? ctx->global_step : -1;
  out->epoch = ctx ? ctx->epoch : -1;
  snprintf(out->error, sizeof out->error, "%s", tr_run_error(reg));
  hk_destroy(reg);
  fclose(log);
  return e;
}
/* dir/ck's names, sorted, joined with spaces */
static void ck_names(const char *dir, char *out, size_t cap) {
  char ck[400], *names[64];
  struct dirent *de;
  DIR *dd;
  int n = 0, i, j;
  snprintf(ck, sizeof ck, "%s/ck", dir);
  out[0] = 0;
  assert_non_null(dd = opendir(ck));
  while ((de = readdir(dd)) != NULL && n < 64) if (de->d_name[0] != '.') names[n++] = strdup(de->d_name);
  closedir(dd);
  for (i = 1; i < n; i++) for (j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) { char *x = names[j]; names[j] = names[j - 1]; names[j - 1] = x; }
  for (i = 0; i < n; i++) {
    snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? " " : "", names[i]);
    free(names[i]);
  }
}
static void test_retention_auto_epoch_loop(void **state) {
  static const struct { int64_t kill_at; const char *files; } kills[] = {
    { 23, "epoch=2-step=15.ckpt epoch=3-step=20.ckpt last.ckpt" },                        /* epochs 0-3 saved */
    { 33, "epoch=2-step=15.ckpt epoch=4-step=25.ckpt epoch=5-step=30.ckpt last.ckpt" },   /* 4-5 since */
  };
  const char *end_files = "epoch=2-step=15.ckpt epoch=5-step=30.ckpt epoch=6-step=35.ckpt epoch=7-step=40.ckpt last.ckpt";
  char ref[400], dir[400], names[600], logp[500], *log;
  result full, r;
  size_t k;
  (void)state;
  snprintf(ref, sizeof ref, "%s/auto_ref", g_root);
  snprintf(dir, sizeof dir, "%s/auto_killed", g_root);
  assert_int_equal(mkdir(ref, 0755), 0);
  assert_int_equal(mkdir(dir, 0755), 0);
  assert_int_equal(auto_loop(ref, -1, &full), TR_OK); /* uninterrupted (resume "auto" finds nothing) */
  assert_int_equal(full.step, 40);
  ck_names(ref, names, sizeof names);
  assert_string_equal(names, end_files);
  for (k = 0; k < sizeof kills / sizeof kills[0]; k++) {
    int status = 0;
    pid_t pid;
    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) { result c; auto_loop(dir, kills[k].kill_at, &c); _exit(2); }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
      fail_msg("the run to be killed at step %lld ended otherwise (status %d)", (long long)kills[k].kill_at, status);
    ck_names(dir, names, sizeof names);
    if (strcmp(names, kills[k].files)) fail_msg("killed at step %lld: ck holds '%s', not '%s'", (long long)kills[k].kill_at, names, kills[k].files);
  }
  assert_int_equal(auto_loop(dir, -1, &r), TR_OK);
  if (!same_bits(&r, &full))
    fail_msg("killed twice and resumed by \"auto\": ends at step %lld with other bits than the uninterrupted run (step %lld; "
             "w[0] %a vs %a)", (long long)r.step, (long long)full.step, (double)r.w[0], (double)full.w[0]);
  ck_names(dir, names, sizeof names);
  assert_string_equal(names, end_files);
  snprintf(logp, sizeof logp, "%s/log.txt", dir);
  log = slurp(logp);
  assert_non_null(log);
  if (count_of(log, "resume auto: no checkpoint of this run was found: a fresh start") != 1 || count_of(log, "resume auto: resuming ") != 2 ||
      !strstr(log, "/ck/epoch=3-step=20.ckpt (global step 20;") == !strstr(log, "/ck/last.ckpt (global step 20;") ||
      !strstr(log, "(global step 30; the newest of 4 checkpoints of this run that load)"))
    fail_msg("the runs said: %s", log);
  free(log);
}
static void accumulate_in(tr_run_desc d, int64_t batches) {
  mini r;
  int64_t i;
  d.accumulate_grad_batches = 2;
  mini_open(&r);
  assert_int_equal(mini_run(&r, d, NULL, MS_NONE), TR_OK);
  assert_int_equal(r.trains, batches);
  for (i = 0; i < batches && i < 32; i++)
    if (r.steps_at[i] != (i % 2 == 1)) fail_msg("batch %lld: tr_run_update returned %lld", (long long)i, (long long)r.steps_at[i]);
  assert_int_equal(r.updates, batches / 2);
  mini_close(&r);
}
static void test_accumulate_step_loop(void **state) { (void)state; accumulate_in(step_desc(5), 10); }
static void test_accumulate_epoch_loop(void **state) { /* 2 epochs of 6 batches: 3 steps each */
  tr_run_desc d = epoch_desc(2);
  (void)state;
  d.train_batches = 6;
  accumulate_in(d, 12);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_uninterrupted_resumes),
    cmocka_unit_test(test_ctrl_c_step_train_batch),
    cmocka_unit_test(test_ctrl_c_step_before_validation),
    cmocka_unit_test(test_ctrl_c_step_validation),
    cmocka_unit_test(test_ctrl_c_step_last_validation),
    cmocka_unit_test(test_ctrl_c_step_save_model),
    cmocka_unit_test(test_ctrl_c_step_on_save_checkpoint),
    cmocka_unit_test(test_ctrl_c_step_train_end),
    cmocka_unit_test(test_ctrl_c_epoch_train_batch),
    cmocka_unit_test(test_ctrl_c_epoch_last_batch),
    cmocka_unit_test(test_ctrl_c_epoch_end),
    cmocka_unit_test(test_ctrl_c_epoch_end_validation),
    cmocka_unit_test(test_ctrl_c_epoch_step_validation),
    cmocka_unit_test(test_ctrl_c_epoch_save_model),
    cmocka_unit_test(test_ctrl_c_epoch_on_save_checkpoint),
    cmocka_unit_test(test_ctrl_c_epoch_train_end),
    cmocka_unit_test(test_loop_moves_epoch),
    cmocka_unit_test(test_loop_moves_global_step),
    cmocka_unit_test(test_loop_moves_batch_idx),
    cmocka_unit_test(test_no_update),
    cmocka_unit_test(test_update_twice),
    cmocka_unit_test(test_update_in_validation),
    cmocka_unit_test(test_lr_scale_step_loop),
    cmocka_unit_test(test_lr_scale_epoch_loop),
    cmocka_unit_test(test_lr_scale_on_lr_at),
    cmocka_unit_test(test_fail_at_plain_fire),
    cmocka_unit_test(test_fail_at_plain_fire_old_calls),
    cmocka_unit_test(test_load_too_little),
    cmocka_unit_test(test_load_too_much),
    cmocka_unit_test(test_view_count_refused),
    cmocka_unit_test(test_views_count_arrays),
    cmocka_unit_test(test_log_every_beyond_run),
    cmocka_unit_test(test_failed_run_says_why_once),
    cmocka_unit_test(test_nothing_registered_quiet),
    cmocka_unit_test(test_tr_views_null_base),
    cmocka_unit_test(test_late_grad_buffer),
    cmocka_unit_test(test_request_checkpoint_step_loop),
    cmocka_unit_test(test_retention_step_loop),
    cmocka_unit_test(test_request_checkpoint_epoch_loop),
    cmocka_unit_test(test_retention_auto_epoch_loop),
    cmocka_unit_test(test_accumulate_step_loop),
    cmocka_unit_test(test_accumulate_epoch_loop),
  };
  return run_tests_in_dir(tests, "test_loop", g_root);
}
