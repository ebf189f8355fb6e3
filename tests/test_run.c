/* tests/test_run.c - train.h's run layer in a hand-written loop (no tr_trainer anywhere).

   A step loop of its own (one parameter vector, plain SGD), the batteries made from a registry, and
   the run layer's calls: the loggers share one version directory; records are built from the context
   (metrics set since the last record only, histograms included); a loop that never fires teardown
   still gets every record on disk; checkpoints in the loop's own format round-trip the model, the
   counters and every callback's state, and refuse what is not theirs; requests, signals, minimum
   steps and the stop decision; the one-time warnings for settings that can never fire; the state
   machine: calls out of order refused at the call in one error channel (tr_run_error = hk_last_error),
   tr_run_setup during a run, a skipped tr_run_batch_end / tr_run_epoch_end, a forgotten "val" record,
   nested saves and loads. */
#define TEST_NO_FSYNC /* what it checks needs no flush to the disk (tests/test.h) */
#include "test.h"

#include <fcntl.h>

static char g_root[256];
static int g_toy_lr_given; /* 1: the loop gives ctx->lr (tr_run_lr), toy_step leaves it */

/* ---- the loop's own model and format: 4 floats, "TOY1" then the floats --------------------------- */
typedef struct toy { float p[4], g[4]; hk_tensor pv[1], gv[1]; } toy;
static int toy_save(void *user, FILE *f) {
  toy *m = (toy *)user;
  return fwrite("TOY1", 1, 4, f) == 4 && fwrite(m->p, sizeof m->p, 1, f) == 1 ? 0 : -1;
}
static int toy_load(void *user, FILE *f) {
  toy *m = (toy *)user;
  char magic[4];
  return fread(magic, 1, 4, f) == 4 && !memcmp(magic, "TOY1", 4) && fread(m->p, sizeof m->p, 1, f) == 1 ? 0 : -1;
}
static void toy_init(toy *m, hk_ctx *ctx) {
  int i;
  memset(m, 0, sizeof *m);
  for (i = 0; i < 4; i++) m->p[i] = 1.0f + (float)i;
  m->pv[0] = (hk_tensor){ "w", m->p, 4, 0 };
  m->gv[0] = (hk_tensor){ "w", m->g, 4, 0 };
  memset(ctx, 0, sizeof *ctx);
  ctx->params = m->pv;
  ctx->grads = m->gv;
  ctx->n_tensors = 1;
}
/* One step of the loop, with its sites: loss = sum p^2 / 4, SGD at lr 0.1. */
static void toy_step(hk_registry *reg, hk_ctx *ctx, hk_flow *flow, toy *m) {
  int i;
  double loss = 0;
  ctx->batch_idx = ctx->global_step;
  if (!g_toy_lr_given) ctx->lr = 0.1;
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, ctx, flow);
  for (i = 0; i < 4; i++) loss += (double)m->p[i] * m->p[i] / 4;
  ctx->loss = loss;
  HK_FIRE_FLOW(reg, HK_ON_BEFORE_BACKWARD, ctx, flow);
  for (i = 0; i < 4; i++) m->g[i] = m->p[i] / 2;
  hk_grads_changed(ctx);
  HK_FIRE_FLOW(reg, HK_ON_AFTER_BACKWARD, ctx, flow);
  HK_FIRE_FLOW(reg, HK_ON_BEFORE_OPTIMIZER_STEP, ctx, flow);
  if (!HK_FLOW_HAS(flow, HK_FLOW_SKIP_STEP)) {
    for (i = 0; i < 4; i++) m->p[i] -= 0.1f * m->g[i];
    ctx->global_step++;
  }
  hk_flow_clear(flow, HK_FLOW_SKIP_STEP | HK_FLOW_SKIP_BATCH);
  ctx->samples_seen += 8;
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, ctx, flow);
}
/* A validation of the loop's own: val/loss from a script, logged, then on_validation_end. */
static void toy_validate(hk_registry *reg, hk_ctx *ctx, hk_flow *flow, double val) {
  HK_FIRE_FLOW(reg, HK_ON_VALIDATION_START, ctx, flow);
  hk_metric_set(ctx, "val/loss", val);
  HK_FIRE_FLOW(reg, HK_ON_VALIDATION_EPOCH_END, ctx, flow);
  tr_run_log(reg, ctx, "val");
  HK_FIRE_FLOW(reg, HK_ON_VALIDATION_END, ctx, flow);
}

static int count_lines(const char *s) { int n = 0; for (; s && *s; s++) n += *s == '\n'; return n; }
static void dir_for(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", g_root, name);
  mkdir(out, 0777);
}

/* csv and jsonl share the run's version directory; a loop that ends without teardown (no
   tr_run_finish) still has every record on disk once the registry is destroyed */
static void test_shared_dir_and_flush_at_destroy(void **state) {
  char dir[400], path[600];
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  toy m;
  char *csv, *jsonl;
  int s;
  (void)state;
  dir_for(dir, sizeof dir, "shared");
  toy_init(&m, &ctx);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .save_dir = dir, .epochs = TR_NO, .log_every_n_steps = 2 }), TR_OK);
  assert_int_equal(hk_spec_apply(reg, "csv(flush_every=1000); jsonl(flush_every=1000)"), HK_OK);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK); /* setup .. on_train_start */
  for (s = 0; s < 9; s++) {
    toy_step(reg, &ctx, &flow, &m);
    tr_run_batch_end(reg, &ctx, &flow);
  }
  snprintf(path, sizeof path, "%s/lightning_logs/version_0", dir);
  assert_string_equal(tr_logger_get(reg, hk_find(reg, "csv"))->dir, path);
  assert_string_equal(tr_logger_get(reg, hk_find(reg, "jsonl"))->dir, path);
  assert_string_equal(tr_run_dir(reg), path);
  hk_destroy(reg); /* no teardown, no tr_run_finish */
  snprintf(path, sizeof path, "%s/lightning_logs/version_0/metrics.csv", dir);
  csv = slurp(path);
  snprintf(path, sizeof path, "%s/lightning_logs/version_0/metrics.jsonl", dir);
  jsonl = slurp(path);
  assert_non_null(csv);
  assert_non_null(jsonl);
  assert_int_equal(count_lines(csv), 1 + 4); /* the header, steps 2, 4, 6, 8 */
  assert_int_equal(count_lines(jsonl), 1 + 4); /* the hparams line, then the records */
  assert_non_null(strstr(csv, "\n0,7,")); /* epoch 0, Lightning's step (steps taken - 1) */
  free(csv);
  free(jsonl);
  hk_ctx_free(&ctx);
  /* a logger with a save_dir of its own: the run's directory is the one it opened (nothing made in ./runs) */
  reg = hk_create(NULL);
  toy_init(&m, &ctx);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO }), TR_OK);
  snprintf(path, sizeof path, "csv(save_dir=\"%s/own\")", dir);
  assert_int_equal(hk_spec_apply(reg, path), HK_OK);
  ctx.stage = HK_STAGE_FIT;
  HK_FIRE(reg, HK_SETUP, &ctx);
  snprintf(path, sizeof path, "%s/own/lightning_logs/version_0", dir);
  assert_string_equal(tr_logger_get(reg, hk_find(reg, "csv"))->dir, path);
  assert_string_equal(tr_run_dir(reg), path);
  hk_destroy(reg);
  hk_ctx_free(&ctx);
}

/* What a record carries: train/loss and the metrics set since the last record, lazy ones always,
   never a value set once repeated in every row; a gradient histogram rides along in any loop */
typedef struct seen { int n; double loss[16]; int has_once[16], has_fresh[16], hist[16]; } seen;
static hk_signal on_log_rec(hk_ctx *ctx, void *user) {
  seen *s = (seen *)user;
  tr_log_record *r = tr_log_current(ctx);
  double v;
  if (!r || strcmp(r->stage, "train") || s->n >= 16) return HK_CONTINUE;
  tr_log_get(r, "train/loss", &s->loss[s->n]);
  s->has_once[s->n] = tr_log_get(r, "once", &v);
  s->has_fresh[s->n] = tr_log_get(r, "fresh", &v);
  s->hist[s->n] = r->n_histograms;
  s->n++;
  return HK_CONTINUE;
}
static hk_signal set_fresh(hk_ctx *ctx, void *user) { (void)user; hk_metric_set(ctx, "fresh", (double)ctx->global_step); return HK_CONTINUE; }
static void test_records_from_context(void **state) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  toy m;
  seen s;
  int i;
  (void)state;
  memset(&s, 0, sizeof s);
  toy_init(&m, &ctx);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .log_every_n_steps = 1 }), TR_OK);
  assert_int_equal(tr_gradient_monitor(reg, &(tr_gradient_monitor_desc){ .log_frequency = 2, .histogram_bins = 8 }, NULL), TR_OK);
  hk_on(reg, HK_ON_LOG, on_log_rec, &s, &(hk_opts){ .name = "rec" }, NULL);
  hk_on(reg, HK_ON_TRAIN_BATCH_END, set_fresh, NULL, &(hk_opts){ .name = "fresh" }, NULL);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  hk_metric_set(&ctx, "once", 42); /* set before the first step only */
  for (i = 0; i < 4; i++) {
    toy_step(reg, &ctx, &flow, &m);
    assert_int_equal(tr_run_batch_end(reg, &ctx, &flow), 0);
  }
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  assert_int_equal(s.n, 4);
  assert_true(s.loss[0] == 7.5); /* (1 + 4 + 9 + 16) / 4: the batch's loss */
  assert_int_equal(s.has_once[0], 1);
  assert_int_equal(s.has_once[1] + s.has_once[2] + s.has_once[3], 0); /* not repeated */
  assert_int_equal(s.has_fresh[0] + s.has_fresh[1] + s.has_fresh[2] + s.has_fresh[3], 4);
  assert_int_equal(s.hist[0], 0); /* gradient_monitor is due at steps 2, 4: its histogram joins those records */
  assert_int_equal(s.hist[1], 1);
  assert_int_equal(s.hist[3], 1);
  hk_destroy(reg);
  hk_ctx_free(&ctx);
}

/* The loop's own format, with the callbacks' state and counters after it: exact round trip; a
   corrupted or foreign file is refused before anything changes */
static void test_save_load_own_format(void **state) {
  char dir[400], path[600], bad[600];
  hk_registry *reg = hk_create(NULL), *reg2;
  hk_ctx ctx, ctx2;
  hk_flow flow = { 0 };
  toy m, m2;
  const tr_early_stopping_state *es;
  FILE *f;
  char *bytes;
  int i;
  (void)state;
  dir_for(dir, sizeof dir, "ckpt");
  snprintf(path, sizeof path, "%s/run.bin", dir);
  toy_init(&m, &ctx);
  tr_run_desc d = { .epochs = TR_NO, .save_model = toy_save, .load_model = toy_load, .model_user = &m, .log_every_n_steps = -1 };
  assert_int_equal(tr_run_setup(reg, &d), TR_OK);
  assert_int_equal(hk_spec_apply(reg, "early_stopping(monitor=val/loss, patience=5)"), HK_OK);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  for (i = 0; i < 3; i++) {
    toy_step(reg, &ctx, &flow, &m);
    tr_run_batch_end(reg, &ctx, &flow);
    toy_validate(reg, &ctx, &flow, 1.0 + i); /* worse each time: wait_count 0, 1, 2 */
  }
  assert_int_equal(tr_run_save(reg, &ctx, path), TR_OK);
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  bytes = slurp(path);
  assert_memory_equal(bytes, "TOY1", 4); /* the loop's format comes first */
  free(bytes);
  /* a new process, in effect: a new registry, a fresh model, the same spec */
  toy_init(&m2, &ctx2);
  memset(m2.p, 0, sizeof m2.p);
  reg2 = hk_create(NULL);
  d.model_user = &m2;
  assert_int_equal(tr_run_setup(reg2, &d), TR_OK);
  assert_int_equal(hk_spec_apply(reg2, "early_stopping(monitor=val/loss, patience=5)"), HK_OK);
  assert_int_equal(tr_run_start(reg2, &ctx2, path), TR_OK);
  assert_memory_equal(m2.p, m.p, sizeof m.p);
  assert_int_equal(ctx2.global_step, 3);
  assert_int_equal(ctx2.samples_seen, 24);
  es = tr_early_stopping_get(reg2, hk_find(reg2, "early_stopping{monitor=val/loss,mode=min}"));
  assert_non_null(es);
  assert_int_equal(es->wait_count, 2);
  assert_true(es->best_score == 1.0);
  assert_string_equal(tr_run_get(reg2)->resume_from, path);
  assert_int_equal(tr_run_finish(reg2, &ctx2, TR_OK), TR_OK);
  /* a flipped byte in the state block: refused, nothing changed */
  bytes = slurp(path);
  snprintf(bad, sizeof bad, "%s/bad.bin", dir);
  f = fopen(bad, "wb");
  {
    struct stat st;
    stat(path, &st);
    bytes[st.st_size - 30] ^= 1;
    fwrite(bytes, 1, (size_t)st.st_size, f);
  }
  fclose(f);
  free(bytes);
  memset(m2.p, 0, sizeof m2.p);
  assert_int_equal(tr_run_load(reg2, &ctx2, bad), TR_ERR_FORMAT);
  assert_non_null(strstr(tr_run_error(reg2), "checksum"));
  assert_true(m2.p[0] == 0.0f);
  /* a file that is not a run checkpoint, and a directory */
  assert_int_equal(tr_run_load(reg2, &ctx2, "/etc/hostname"), TR_ERR_FORMAT);
  assert_non_null(strstr(tr_run_error(reg2), "not written by tr_run_save"));
  assert_int_equal(tr_run_load(reg2, &ctx2, dir), TR_ERR_IO);
  hk_destroy(reg);
  hk_destroy(reg2);
  hk_ctx_free(&ctx);
  hk_ctx_free(&ctx2);
}

/* Requests and stops: a checkpoint request saves at save_to; a validation request comes back as
   TR_RUN_VALIDATE; HK_STOP waits for min_steps; a signal fails the run through on_exception */
static int exceptions;
static hk_signal on_exc(hk_ctx *ctx, void *user) { (void)user; (void)ctx; exceptions++; return HK_CONTINUE; }
static hk_signal ask(hk_ctx *ctx, void *user) {
  (void)user;
  if (ctx->global_step == 2) hk_request(ctx, HK_REQUEST_CHECKPOINT | HK_REQUEST_VALIDATION);
  return ctx->global_step >= 3 ? HK_STOP : HK_CONTINUE;
}
static void test_requests_and_stops(void **state) {
  char dir[400], path[600];
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  toy m;
  unsigned next = 0;
  struct stat st;
  (void)state;
  dir_for(dir, sizeof dir, "requests");
  snprintf(path, sizeof path, "%s/asked.bin", dir);
  toy_init(&m, &ctx);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .min_steps = 5, .save_to = path,
                                                      .save_model = toy_save, .load_model = toy_load, .model_user = &m }), TR_OK);
  hk_on(reg, HK_ON_TRAIN_BATCH_END, ask, NULL, &(hk_opts){ .name = "ask" }, NULL);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  while (!(next & TR_RUN_STOP)) {
    toy_step(reg, &ctx, &flow, &m);
    next = tr_run_batch_end(reg, &ctx, &flow);
    if (ctx.global_step == 2) { assert_true(next & TR_RUN_VALIDATE); assert_int_equal(stat(path, &st), 0); }
  }
  assert_int_equal(ctx.global_step, 5); /* the stop from step 3 on waited for min_steps */
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  /* Ctrl-C: the run stops after the step and ends through on_exception */
  hk_off(reg, hk_find(reg, "ask"));
  hk_on(reg, HK_ON_EXCEPTION, on_exc, NULL, &(hk_opts){ .name = "exc" }, NULL);
  exceptions = 0;
  flow.signals = 0;
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  toy_step(reg, &ctx, &flow, &m);
  assert_int_equal(tr_run_batch_end(reg, &ctx, &flow), 0);
  raise(SIGINT);
  toy_step(reg, &ctx, &flow, &m);
  assert_true(tr_run_batch_end(reg, &ctx, &flow) & TR_RUN_STOP);
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_ERR_INTERRUPTED);
  assert_int_equal(exceptions, 1);
  assert_non_null(strstr(tr_run_error(reg), "interrupted"));
  hk_destroy(reg);
  hk_ctx_free(&ctx);
}

/* Settings that can never fire are said at once, or once: a val/ monitor in a run that never
   validates fails at the start; early_stopping at on_train_epoch_end in a loop without epochs (a
   setting of its own) warns at the end; a loop that never sets ctx.stage is told */
static void test_misconfiguration(void **state) {
  char logpath[600];
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  toy m;
  FILE *log;
  char *text;
  int i;
  (void)state;
  snprintf(logpath, sizeof logpath, "%s/warnings.txt", g_root);
  log = fopen(logpath, "w");
  toy_init(&m, &ctx);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .validation = TR_NO, .log = log }), TR_OK);
  assert_int_equal(hk_spec_apply(reg, "early_stopping(monitor=val/loss)"), HK_OK);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_ERR_HOOK);
  assert_non_null(strstr(tr_run_error(reg), "never validates"));
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_ERR_HOOK);
  hk_destroy(reg);
  /* check_on_train_epoch_end=true in a step loop: never checked, said once, at tr_run_start */
  reg = hk_create(NULL);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .log = log }), TR_OK);
  assert_int_equal(hk_spec_apply(reg, "early_stopping(monitor=val/loss, check_on_train_epoch_end=true)"), HK_OK);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  for (i = 0; i < 3; i++) {
    toy_step(reg, &ctx, &flow, &m);
    tr_run_batch_end(reg, &ctx, &flow);
    toy_validate(reg, &ctx, &flow, 1.0);
  }
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  hk_destroy(reg);
  /* the stage never set: early_stopping says so at its first check */
  reg = hk_create(NULL);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .log = log }), TR_OK);
  assert_int_equal(hk_spec_apply(reg, "early_stopping(monitor=val/loss)"), HK_OK);
  ctx.stage = HK_STAGE_NONE;
  for (i = 0; i < 2; i++) HK_FIRE(reg, HK_ON_TRAIN_EPOCH_END, &ctx);
  hk_destroy(reg);
  fclose(log);
  text = slurp(logpath);
  assert_non_null(strstr(text, "checks 'val/loss' at on_train_epoch_end, which this loop never fires"));
  assert_null(strstr(text, "never checked 'val/loss'")); /* once: not again at the end */
  assert_non_null(strstr(text, "ctx->stage is not set (HK_STAGE_NONE) at on_train_epoch_end"));
  assert_null(strstr(strstr(text, "HK_STAGE_NONE") + 1, "HK_STAGE_NONE")); /* once */
  free(text);
  hk_ctx_free(&ctx);
}

/* The bar in a step loop: its total is max_steps; tr_print's line comes above it */
static void test_bar_and_print(void **state) {
  char path[600];
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  toy m;
  FILE *out;
  char *text;
  int i;
  (void)state;
  snprintf(path, sizeof path, "%s/bar.txt", g_root);
  out = fopen(path, "w");
  toy_init(&m, &ctx);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = 6 }), TR_OK);
  assert_int_equal(tr_progress_bar(reg, &(tr_progress_bar_desc){ .out = out, .mode = TR_BAR_TTY, .width = 70, .ascii = 1,
                                                                   .refresh_seconds = 1e-9 }, NULL), TR_OK);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  for (i = 0; i < 6; i++) {
    toy_step(reg, &ctx, &flow, &m);
    tr_run_batch_end(reg, &ctx, &flow);
    if (i == 2) tr_print(reg, "hello from step %d", i + 1);
  }
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  hk_destroy(reg);
  fclose(out);
  text = slurp(path);
  assert_non_null(strstr(text, "3/6"));
  assert_non_null(strstr(text, "6/6"));
  assert_non_null(strstr(text, "\r\033[Khello from step 3\n")); /* the bar's line cleared first */
  free(text);
  hk_ctx_free(&ctx);
}

/* tr_print prints on global rank 0 only (Lightning's print), tr_print_all on every rank. The rank is
   the run's (ctx->rank at tr_run_start, kept after the run), before any run the launcher's (RANK
   here; mpirun's in tests/log_mpi.sh). Captured from stdout (no bar). */
static void test_print_rank_zero(void **state) {
  char path[600];
  hk_registry *reg = hk_create(NULL), *reg0 = hk_create(NULL);
  hk_ctx ctx, ctx0;
  toy m;
  char *text;
  int fd, saved;
  (void)state;
  snprintf(path, sizeof path, "%s/print.txt", g_root);
  toy_init(&m, &ctx);
  toy_init(&m, &ctx0);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .no_signals = 1 }), TR_OK);
  assert_int_equal(tr_run_setup(reg0, &(tr_run_desc){ .epochs = TR_NO, .no_signals = 1 }), TR_OK);
  fflush(stdout);
  saved = dup(1);
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_true(saved >= 0 && fd >= 0 && dup2(fd, 1) == 1);
  setenv("RANK", "1", 1); /* a launcher's rank 1 */
  tr_print(reg, "A: rank 1 before the run");
  tr_print(NULL, "B: rank 1 without a registry");
  tr_print_all(reg, "C: every rank before the run");
  unsetenv("RANK");
  ctx.rank = 1;
  ctx.world_size = 2;
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  assert_int_equal(tr_run_start(reg0, &ctx0, NULL), TR_OK);
  tr_print(reg, "D: rank 1 in the run");
  tr_print_all(reg, "E: every rank in the run");
  tr_print(reg0, "F: rank 0 in the run");
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  assert_int_equal(tr_run_finish(reg0, &ctx0, TR_OK), TR_OK);
  tr_print(reg, "G: rank 1 after the run");
  tr_print(NULL, "H: no launcher, no registry: rank 0");
  fflush(stdout);
  assert_int_equal(dup2(saved, 1), 1);
  close(saved);
  close(fd);
  text = slurp(path);
  assert_non_null(text);
  assert_string_equal(text, "C: every rank before the run\nE: every rank in the run\nF: rank 0 in the run\n"
                            "H: no launcher, no registry: rank 0\n");
  free(text);
  hk_destroy(reg);
  hk_destroy(reg0);
  hk_ctx_free(&ctx);
  hk_ctx_free(&ctx0);
}

/* An epoch loop resumed in the middle of an epoch fires no on_train_epoch_start: the bar starts at
   the first batch anyway, at the batch it resumed from, with the run's epoch length as its total */
static void test_bar_mid_epoch(void **state) {
  char path[600];
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  toy m;
  FILE *out;
  char *text;
  int b;
  (void)state;
  snprintf(path, sizeof path, "%s/bar_lines.txt", g_root);
  out = fopen(path, "w");
  toy_init(&m, &ctx);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .train_batches = 10 }), TR_OK);
  assert_int_equal(tr_progress_bar(reg, &(tr_progress_bar_desc){ .out = out, .mode = TR_BAR_LINES, .ascii = 1 }, NULL), TR_OK);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  ctx.epoch = 3;
  ctx.global_step = 6;
  for (b = 6; b < 10; b++) { /* resumed at batch 6 of epoch 3 (toy_step: batch_idx = global_step) */
    toy_step(reg, &ctx, &flow, &m);
    assert_int_equal(tr_run_batch_end(reg, &ctx, &flow), 0);
  }
  HK_FIRE(reg, HK_ON_TRAIN_EPOCH_END, &ctx);
  assert_int_equal(tr_run_epoch_end(reg, &ctx, &flow), 0);
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  hk_destroy(reg);
  fclose(out);
  text = slurp(path);
  assert_non_null(strstr(text, "Epoch 3: 100%"));
  assert_non_null(strstr(text, "10/10"));
  free(text);
  hk_ctx_free(&ctx);
}

/* A spec-made callback is reachable by its factory, in order, without knowing the name it chose */
static void test_spec_find(void **state) {
  char dir[400];
  hk_registry *reg = hk_create(NULL);
  hk_handle a, b;
  (void)state;
  dir_for(dir, sizeof dir, "find");
  assert_int_equal(tr_run_setup(reg, NULL), TR_OK); /* the standard factories come with the run */
  assert_int_equal(hk_spec_apply(reg, "early_stopping(monitor=val/loss); model_checkpoint(dirpath=ck1); "
                                      "model_checkpoint(dirpath=ck2, monitor=val/loss)"), HK_OK);
  a = hk_spec_find(reg, "model_checkpoint", 0);
  b = hk_spec_find(reg, "model_checkpoint", 1);
  assert_true(a > 0 && b > 0 && a != b);
  assert_string_equal(tr_model_checkpoint_get(reg, a)->dirpath, "ck1");
  assert_string_equal(tr_model_checkpoint_get(reg, b)->dirpath, "ck2");
  assert_int_equal(hk_spec_find(reg, "model_checkpoint", 2), 0);
  assert_non_null(tr_early_stopping_get(reg, hk_spec_find(reg, NULL, 0))); /* any factory: the first */
  assert_int_equal(hk_off(reg, a), HK_OK);
  assert_int_equal(hk_spec_find(reg, "model_checkpoint", 0), b); /* removed ones are skipped */
  assert_int_equal(hk_spec_find(reg, "csv", 0), 0);
  hk_destroy(reg);
}

/* Bad settings are refused with a message naming the field */
static void test_bad_setup(void **state) {
  hk_registry *reg = hk_create(NULL);
  (void)state;
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = 7 }), TR_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(reg), "epochs, validation and check_on_train_epoch_end"));
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .max_steps = -1 }), TR_ERR_INVALID);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .save_model = toy_save }), TR_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(reg), "save_model and load_model together"));
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .version = "a/b" }), TR_ERR_INVALID);
  assert_int_equal(tr_run_setup(reg, NULL), TR_OK);
  hk_destroy(reg);
}

/* ---- the state machine: a call out of order is refused at the call, in one error channel ---------- */
/* tr_run_error and hk_last_error say the same, and it names the call to make */
static void assert_refusal(hk_registry *reg, const char *says) {
  if (!strstr(tr_run_error(reg), says)) fail_msg("tr_run_error: '%s' lacks '%s'", tr_run_error(reg), says);
  assert_string_equal(hk_last_error(reg), tr_run_error(reg));
}

/* tr_run_batch_end / tr_run_epoch_end before tr_run_start, and tr_run_finish without a start (or a
   second time), returned success */
static void test_calls_before_start(void **state) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  toy m;
  (void)state;
  toy_init(&m, &ctx);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .no_signals = 1 }), TR_OK);
  assert_int_equal(tr_run_batch_end(reg, &ctx, &flow), TR_RUN_STOP);
  assert_refusal(reg, "tr_run_batch_end: no run is going: call tr_run_start first");
  assert_int_equal(tr_run_epoch_end(reg, &ctx, &flow), TR_RUN_STOP);
  assert_refusal(reg, "tr_run_epoch_end: no run is going: call tr_run_start first");
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_ERR_INVALID);
  assert_refusal(reg, "tr_run_finish: no run is going: call tr_run_start first");
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  assert_string_equal(tr_run_error(reg), "");
  toy_step(reg, &ctx, &flow, &m);
  assert_int_equal(tr_run_batch_end(reg, &ctx, &flow), 0);
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_ERR_INVALID); /* once per start */
  assert_refusal(reg, "tr_run_finish: no run is going: call tr_run_start first");
  hk_destroy(reg);
  hk_ctx_free(&ctx);
}

/* A second tr_run_start returned TR_ERR_INVALID with tr_run_error empty (the reason in hk_last_error
   only): every refusal of the run layer says the same in both */
static void test_one_error_channel(void **state) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  toy m;
  (void)state;
  toy_init(&m, &ctx);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .no_signals = 1 }), TR_OK);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_ERR_INVALID);  /* a second start */
  assert_refusal(reg, "tr_run_start: a fit run is going already (tr_run_start began it): tr_run_finish ends it");
  toy_step(reg, &ctx, &flow, &m);
  assert_int_equal(tr_run_batch_end(reg, &ctx, &flow), 0);          /* the run goes on: refusals do not fail it */
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  /* the other refusals: the same text in both */
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = 7 }), TR_ERR_INVALID);
  assert_refusal(reg, "tr_run_setup: epochs, validation and check_on_train_epoch_end take");
  assert_int_equal(tr_run_log(reg, &ctx, "vall"), HK_FAIL);          /* was HK_CONTINUE, silently */
  assert_refusal(reg, "tr_run_log: the stage 'vall' is not \"train\", \"val\" or \"test\"");
  assert_int_equal(tr_run_save(reg, &ctx, "x.bin"), TR_ERR_INVALID); /* no save_model */
  assert_refusal(reg, "tr_run_save: cannot save 'x.bin': the run has no save_model");
  assert_int_equal(tr_run_load(reg, &ctx, "x.bin"), TR_ERR_INVALID);
  assert_refusal(reg, "tr_run_load: the run has no load_model");
  assert_int_equal(tr_run_hparam(reg, "a=b", "c"), TR_ERR_INVALID);
  assert_refusal(reg, "tr_run_hparam: the key 'a=b' holds a control character or '='");
  hk_destroy(reg);
  hk_ctx_free(&ctx);
}

/* tr_run_setup during a run returned TR_OK and freed the strings the run was using: a hook that set
   the run up again while a checkpoint was saved (model_checkpoint's, then the default one at
   save_to) had the next save write to a freed path (ASan: heap-use-after-free) */
static tr_run_desc g_setup_again;
static tr_err g_setup_again_said;
static hk_signal setup_again(hk_ctx *ctx, void *user) {
  (void)user;
  g_setup_again_said = tr_run_setup(ctx->reg, &g_setup_again);
  return HK_CONTINUE;
}
static hk_signal ask_default_checkpoint(hk_ctx *ctx, void *user) { (void)user; hk_request(ctx, HK_REQUEST_CHECKPOINT); return HK_CONTINUE; }
static void test_setup_refused_during_run(void **state) {
  char dir[400], spec[700], path[600], save_to[600];
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  toy m;
  struct stat st;
  int i;
  (void)state;
  dir_for(dir, sizeof dir, "setup_again");
  snprintf(save_to, sizeof save_to, "%s/default.bin", dir);
  toy_init(&m, &ctx);
  g_setup_again = (tr_run_desc){ .epochs = TR_NO, .no_signals = 1, .save_to = save_to, .save_dir = dir, .save_model = toy_save,
                                 .load_model = toy_load, .model_user = &m };
  assert_int_equal(tr_run_setup(reg, &g_setup_again), TR_OK);
  snprintf(spec, sizeof spec, "model_checkpoint(every_n_train_steps=1, dirpath=\"%s/mc\", filename=\"{step}\")", dir);
  assert_int_equal(hk_spec_apply(reg, spec), HK_OK);
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_BATCH_END, ask_default_checkpoint, NULL, NULL, NULL), HK_OK);
  assert_int_equal(hk_on(reg, HK_ON_CHECKPOINT_SAVED, setup_again, NULL, NULL, NULL), HK_OK);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  assert_int_equal(tr_run_setup(reg, &g_setup_again), TR_ERR_INVALID); /* from the loop */
  assert_refusal(reg, "tr_run_setup: called during a fit run (tr_run_start began it): the run's settings are fixed until "
                      "it ends; call tr_run_setup before tr_run_start or after tr_run_finish");
  for (i = 0; i < 2; i++) {
    g_setup_again_said = TR_OK;
    toy_step(reg, &ctx, &flow, &m);
    assert_int_equal(tr_run_batch_end(reg, &ctx, &flow), 0);         /* model_checkpoint's file, then save_to */
    assert_int_equal(g_setup_again_said, TR_ERR_INVALID);             /* from a hook of the save */
  }
  assert_int_equal(stat(save_to, &st), 0);
  snprintf(path, sizeof path, "%s/mc/step=2.ckpt", dir);
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  assert_int_equal(tr_run_setup(reg, &g_setup_again), TR_OK);         /* after the run: fine */
  hk_destroy(reg);
  hk_ctx_free(&ctx);
}

/* A loop that fired on_train_batch_end and never called tr_run_batch_end: model_checkpoint's queued
   file name (ctx->checkpoint_paths) was freed at its next save point and read there (ASan:
   heap-use-after-free at the second step), and the run ended "ok" with no checkpoint written. Now
   the next event fails the run, naming the call; the same for on_train_epoch_end / tr_run_epoch_end. */
static void forgetful_loop(hk_registry *reg, hk_ctx *ctx, hk_flow *flow, int batch_start) {
  int i;
  for (i = 0; i < 3; i++) {
    if (batch_start) HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, ctx, flow);
    ctx->global_step++;
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, ctx, flow);
    if (i == 0) assert_false(HK_FLOW_HAS(flow, HK_FLOW_FAIL));
    else assert_true(HK_FLOW_HAS(flow, HK_FLOW_FAIL));                /* said at the event, to the loop's flow */
  }
}
static void test_batch_end_forgotten(void **state) {
  char dir[400], spec[700];
  hk_registry *reg;
  hk_ctx ctx;
  hk_flow flow;
  toy m;
  int mode;
  (void)state;
  dir_for(dir, sizeof dir, "forgotten");
  for (mode = 0; mode < 2; mode++) { /* with on_train_batch_start, and with the end event only */
    reg = hk_create(NULL);
    memset(&flow, 0, sizeof flow);
    toy_init(&m, &ctx);
    assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .no_signals = 1, .save_model = toy_save,
                                                        .load_model = toy_load, .model_user = &m }), TR_OK);
    snprintf(spec, sizeof spec, "model_checkpoint(every_n_train_steps=1, dirpath=\"%s/%d\")", dir, mode);
    assert_int_equal(hk_spec_apply(reg, spec), HK_OK);
    assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
    forgetful_loop(reg, &ctx, &flow, mode == 0);
    assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_ERR_INVALID);
    assert_refusal(reg, mode == 0 ? "tr_run_batch_end was not called after on_train_batch_end (at step 1) before "
                                    "on_train_batch_start: call tr_run_batch_end(reg, &ctx, &flow) after every on_train_batch_end"
                                  : "tr_run_batch_end was not called after on_train_batch_end (at step 1) before the next "
                                    "on_train_batch_end");
    hk_destroy(reg);
    hk_ctx_free(&ctx);
  }
  /* at the end of the run, and the epoch's call */
  reg = hk_create(NULL);
  memset(&flow, 0, sizeof flow);
  toy_init(&m, &ctx);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .no_signals = 1 }), TR_OK);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  toy_step(reg, &ctx, &flow, &m);
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_ERR_INVALID);
  assert_refusal(reg, "tr_run_batch_end was not called after on_train_batch_end (at step 1) before tr_run_finish");
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);          /* a batch's events, then the epoch's: fine */
  toy_step(reg, &ctx, &flow, &m);
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_EPOCH_END, &ctx, &flow);
  assert_int_equal(tr_run_batch_end(reg, &ctx, &flow), 0);
  assert_int_equal(tr_run_epoch_end(reg, &ctx, &flow), 0);
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_EPOCH_START, &ctx, &flow);
  toy_step(reg, &ctx, &flow, &m);
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_EPOCH_END, &ctx, &flow);
  assert_true(tr_run_epoch_end(reg, &ctx, &flow) & TR_RUN_STOP);   /* the batch's call is missing: its record is lost */
  assert_refusal(reg, "tr_run_batch_end was not called after on_train_batch_end (at step 3) before tr_run_epoch_end");
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_ERR_INVALID);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_EPOCH_END, &ctx, &flow);
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_EPOCH_START, &ctx, &flow);
  assert_true(HK_FLOW_HAS(&flow, HK_FLOW_FAIL));
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_ERR_INVALID);
  assert_refusal(reg, "tr_run_epoch_end was not called after on_train_epoch_end (at step 3) before on_train_epoch_start");
  assert_int_equal(hk_find(reg, "tr_run"), 0);                     /* the run's watch ends with the run */
  hk_destroy(reg);
  hk_ctx_free(&ctx);
}

/* A validation whose "val" record the loop forgot: val/loss never reached the logs, without a word.
   Now the run says it once, in its log; a loop that sends it, a sanity check and a registry without
   loggers hear nothing. */
static hk_signal count_val(hk_ctx *ctx, void *user) {
  tr_log_record *r = tr_log_current(ctx);
  if (r && !strcmp(r->stage, "val")) ++*(int *)user;
  return HK_CONTINUE;
}
static char *val_loop(int forget, int with_log, int *val_records) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  FILE *log = tmpfile();
  toy m;
  char *text;
  long n;
  int i;
  toy_init(&m, &ctx);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .no_signals = 1, .log = log }), TR_OK);
  if (with_log) assert_int_equal(hk_on(reg, HK_ON_LOG, count_val, val_records, NULL, NULL), HK_OK);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  HK_FIRE_FLOW(reg, HK_ON_SANITY_CHECK_START, &ctx, &flow); /* a sanity check sends no record */
  HK_FIRE_FLOW(reg, HK_ON_VALIDATION_EPOCH_END, &ctx, &flow);
  HK_FIRE_FLOW(reg, HK_ON_SANITY_CHECK_END, &ctx, &flow);
  for (i = 0; i < 4; i++) {
    toy_step(reg, &ctx, &flow, &m);
    assert_int_equal(tr_run_batch_end(reg, &ctx, &flow), 0);
    if (forget) {
      HK_FIRE_FLOW(reg, HK_ON_VALIDATION_START, &ctx, &flow);
      hk_metric_set(&ctx, "val/loss", 1.0);
      HK_FIRE_FLOW(reg, HK_ON_VALIDATION_EPOCH_END, &ctx, &flow); /* and no tr_run_log(reg, &ctx, "val") */
      HK_FIRE_FLOW(reg, HK_ON_VALIDATION_END, &ctx, &flow);
    } else toy_validate(reg, &ctx, &flow, 1.0);
  }
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  fflush(log);
  n = ftell(log);
  rewind(log);
  text = (char *)calloc(1, (size_t)n + 1);
  assert_int_equal(fread(text, 1, (size_t)n, log), (size_t)n);
  fclose(log);
  hk_destroy(reg);
  hk_ctx_free(&ctx);
  return text;
}
static void test_val_record_forgotten(void **state) {
  int records = 0;
  char *text;
  (void)state;
  text = val_loop(1, 1, &records);
  assert_int_equal(records, 0);
  assert_string_equal(text, "tr_run: a validation ended (on_validation_epoch_end at step 1) and no \"val\" record was sent "
                            "before tr_run_batch_end: the loggers never see its val/ metrics; call tr_run_log(reg, &ctx, "
                            "\"val\") after on_validation_epoch_end (said once)\n");
  free(text);
  text = val_loop(0, 1, &records);                 /* sent: no word */
  assert_int_equal(records, 4);
  assert_string_equal(text, "");
  free(text);
  text = val_loop(1, 0, &records);                 /* nothing listens to on_log: nothing is lost */
  assert_string_equal(text, "");
  free(text);
}

/* save_model / load_model (or a hook of the save) calling tr_run_save / tr_run_load again: accepted
   before, and with async_save the nested save shared the staging buffer with the one in progress and
   returned TR_OK for a file that was never written */
typedef struct nest { toy *m; hk_registry *reg; hk_ctx *ctx; char path[600]; tr_err inner; int calls; } nest;
static nest g_nest;
static int nest_save(void *user, FILE *f) {
  if (g_nest.calls++ == 0) g_nest.inner = tr_run_save(g_nest.reg, g_nest.ctx, g_nest.path);
  return toy_save(user, f);
}
static int nest_load(void *user, FILE *f) {
  if (g_nest.calls++ == 0) g_nest.inner = tr_run_load(g_nest.reg, g_nest.ctx, g_nest.path);
  return toy_load(user, f);
}
static void test_nested_save_load_refused(void **state) {
  char dir[400], outer[600];
  hk_registry *reg;
  hk_ctx ctx;
  toy m;
  struct stat st;
  int async;
  (void)state;
  dir_for(dir, sizeof dir, "nested");
  snprintf(outer, sizeof outer, "%s/outer.bin", dir);
  for (async = 0; async < 2; async++) {
    reg = hk_create(NULL);
    toy_init(&m, &ctx);
    assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .no_signals = 1, .save_model = nest_save,
                                                        .load_model = nest_load, .model_user = &m,
                                                        .async_save = async ? TR_YES : 0 }), TR_OK);
    memset(&g_nest, 0, sizeof g_nest);
    g_nest.reg = reg;
    g_nest.ctx = &ctx;
    snprintf(g_nest.path, sizeof g_nest.path, "%s/inner%d.bin", dir, async);
    assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
    assert_int_equal(tr_run_save(reg, &ctx, outer), TR_OK);
    assert_int_equal(g_nest.inner, TR_ERR_INVALID);
    assert_refusal(reg, "tr_run_save: '");
    assert_non_null(strstr(tr_run_error(reg), "inner"));
    assert_non_null(strstr(tr_run_error(reg), "asked while tr_run_save of '"));
    assert_non_null(strstr(tr_run_error(reg), "saves and loads do not nest; ask for a checkpoint with hk_request_checkpoint"));
    assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
    assert_int_equal(stat(outer, &st), 0);
    assert_int_not_equal(stat(g_nest.path, &st), 0);
    memset(&g_nest, 0, sizeof g_nest);               /* load_model loading again */
    g_nest.reg = reg;
    g_nest.ctx = &ctx;
    snprintf(g_nest.path, sizeof g_nest.path, "%s", outer);
    assert_int_equal(tr_run_load(reg, &ctx, outer), TR_OK);
    assert_int_equal(g_nest.inner, TR_ERR_INVALID);
    assert_refusal(reg, "tr_run_load: '");
    assert_non_null(strstr(tr_run_error(reg), "asked while tr_run_load of '"));
    hk_destroy(reg);
    hk_ctx_free(&ctx);
  }
}

/* Calls from hooks while the run's own work is going: tr_run_finish from on_train_end ran a second
   finish inside the first (teardown twice, the run ended under the one in progress), tr_run_log from a
   logger's on_log rebuilt the record the loggers were reading. Refused; the first refuses and fails
   the run (a bug of the loop), the second leaves the record alone. */
static tr_err g_finish_in_hook;
static hk_signal finish_in_hook(hk_ctx *ctx, void *user) { (void)user; g_finish_in_hook = tr_run_finish(ctx->reg, ctx, TR_OK); return HK_CONTINUE; }
static int g_teardowns, g_records;
static hk_signal count_teardown(hk_ctx *ctx, void *user) { (void)ctx; (void)user; g_teardowns++; return HK_CONTINUE; }
static hk_signal log_in_on_log(hk_ctx *ctx, void *user) {
  (void)user;
  g_records++;
  assert_int_equal(tr_run_log(ctx->reg, ctx, "val"), HK_FAIL);
  assert_string_equal(tr_log_current(ctx)->stage, "train");
  return HK_CONTINUE;
}
static void test_calls_from_hooks_refused(void **state) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  toy m;
  (void)state;
  toy_init(&m, &ctx);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .no_signals = 1, .log_every_n_steps = 1 }), TR_OK);
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_END, finish_in_hook, NULL, NULL, NULL), HK_OK);
  assert_int_equal(hk_on(reg, HK_TEARDOWN, count_teardown, NULL, NULL, NULL), HK_OK);
  assert_int_equal(hk_on(reg, HK_ON_LOG, log_in_on_log, NULL, NULL, NULL), HK_OK);
  g_teardowns = g_records = 0;
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  toy_step(reg, &ctx, &flow, &m);
  assert_int_equal(tr_run_batch_end(reg, &ctx, &flow), 0);
  assert_int_equal(g_records, 1);
  assert_refusal(reg, "tr_run_log: called from a hook of on_log while a train record is being logged");
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_ERR_INVALID);
  assert_int_equal(g_finish_in_hook, TR_ERR_INVALID);
  assert_int_equal(g_teardowns, 1);
  assert_refusal(reg, "tr_run_finish: called from a hook while tr_run_finish runs: call it from the loop");
  hk_destroy(reg);
  hk_ctx_free(&ctx);
}


/* Run-layer calls out of place (issue 37, item 17): each refused at the call, naming it and the hook's event. */
static int g_oop_mode; /* 1 tr_run_lr, 2 tr_run_epoch_start, 3 tr_run_finish, 4 tr_run_update, 5 tr_run_end, 6 tr_run_next */
static tr_err g_oop_said;
static double g_oop_lr;
static hk_signal out_of_place(hk_ctx *ctx, void *user) {
  (void)user;
  if (g_oop_mode == 1) g_oop_lr = tr_run_lr(ctx->reg, ctx, 99.0);
  if (g_oop_mode == 2) g_oop_said = tr_run_epoch_start(ctx->reg, ctx, &ctx->flow, 7) == 7 ? TR_ERR_INVALID : TR_OK;
  if (g_oop_mode == 3) g_oop_said = tr_run_finish(ctx->reg, ctx, TR_OK);
  if (g_oop_mode == 4) g_oop_said = tr_run_update(ctx->reg) ? TR_OK : TR_ERR_INVALID;
  if (g_oop_mode == 5) g_oop_said = tr_run_end(ctx->reg);
  if (g_oop_mode == 6) g_oop_said = tr_run_next(ctx->reg) ? TR_OK : TR_ERR_INVALID;
  g_oop_mode = 0; /* once */
  return HK_CONTINUE;
}
static int g_bad_save;
static int oop_save(void *user, FILE *f) { return g_bad_save ? 1 : toy_save(user, f); }
static void test_calls_out_of_place(void **state) {
  static const char *const says[] = { "", "tr_run_lr: called from a hook of on_train_batch_end",
                                      "tr_run_epoch_start: called from a hook of on_train_batch_end",
                                      "tr_run_finish: called from a hook of on_train_batch_end" };
  char path[600];
  int mode;
  (void)state;
  for (mode = 1; mode <= 3; mode++) { /* a loop of tr_run_start's */
    hk_registry *reg = hk_create(NULL);
    hk_ctx ctx;
    hk_flow flow = { 0 };
    toy m;
    toy_init(&m, &ctx);
    assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .no_signals = 1 }), TR_OK);
    assert_int_equal(hk_on(reg, HK_ON_TRAIN_BATCH_END, out_of_place, NULL, NULL, NULL), HK_OK);
    assert_int_equal(hk_on(reg, HK_TEARDOWN, count_teardown, NULL, NULL, NULL), HK_OK);
    assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
    g_teardowns = 0;
    g_oop_mode = mode;
    toy_step(reg, &ctx, &flow, &m);
    assert_non_null(strstr(hk_last_error(reg), says[mode]));
    if (mode == 1) assert_true(g_oop_lr == 0.1 && ctx.lr == 0.1); /* the step's lr stays: a record logs what it used */
    else assert_int_equal(g_oop_said, TR_ERR_INVALID);
    assert_int_equal(g_teardowns, 0); /* the run did not end inside the dispatch */
    (void)tr_run_batch_end(reg, &ctx, &flow);
    assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), mode == 1 ? TR_OK : TR_ERR_INVALID);
    assert_int_equal(g_teardowns, 1);
    if (mode > 1) assert_non_null(strstr(tr_run_error(reg), says[mode])); /* not "tr_run_batch_end was not called" */
    hk_destroy(reg);
    hk_ctx_free(&ctx);
  }
  for (mode = 4; mode <= 6; mode++) { /* YOUR LOOP IN A DOZEN LINES: tr_run_update, _end, _next from a hook */
    hk_registry *reg = hk_create(NULL);
    toy m;
    hk_ctx scratch, *ctx;
    int what, batches = 0;
    toy_init(&m, &scratch);
    assert_int_equal(hk_on(reg, HK_ON_BEFORE_OPTIMIZER_STEP, out_of_place, NULL, NULL, NULL), HK_OK);
    assert_non_null(ctx = tr_run_begin(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = 3, .no_signals = 1,
                                                            .params = m.pv, .grads = m.gv, .n_tensors = 1 }, NULL));
    g_oop_mode = mode;
    while ((what = tr_run_next(reg)) != 0) {
      batches++;
      HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, ctx);
      (void)tr_run_update(reg);
    }
    assert_int_equal(g_oop_said, TR_ERR_INVALID);
    assert_int_equal(batches, 1);
    assert_int_equal(tr_run_end(reg), TR_ERR_INVALID);
    assert_non_null(strstr(tr_run_error(reg), mode == 4 ? "tr_run_update: called from a hook of on_before_optimizer_step"
                                              : mode == 5 ? "tr_run_end: called from a hook of on_before_optimizer_step"
                                              : "tr_run_next: called from a hook of on_before_optimizer_step"));
    hk_destroy(reg);
    hk_ctx_free(&scratch);
  }
  { /* tr_run_save inside a validation: the checkpoint's batch is the training batch's, not the validation's */
    hk_registry *reg = hk_create(NULL);
    hk_ctx ctx;
    hk_flow flow = { 0 };
    toy m;
    int i;
    toy_init(&m, &ctx);
    snprintf(path, sizeof path, "%s/oop.ckpt", g_root);
    assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .no_signals = 1, .save_model = oop_save,
                                                       .load_model = toy_load, .model_user = &m }), TR_OK);
    assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
    for (i = 0; i < 3; i++) { toy_step(reg, &ctx, &flow, &m); (void)tr_run_batch_end(reg, &ctx, &flow); }
    assert_int_equal(tr_run_eval_start(reg, &ctx, &flow, "val", 9), 0);
    ctx.batch_idx = 7;
    assert_int_equal(tr_run_save(reg, &ctx, path), TR_OK);
    g_bad_save = 1; /* issue 37, item 12: a save_model that says no is not a disk error */
    assert_int_equal(tr_run_save(reg, &ctx, path), TR_ERR_IO);
    g_bad_save = 0;
    assert_non_null(strstr(tr_run_error(reg), "save_model returned an error for '"));
    assert_non_null(strstr(tr_run_error(reg), "the previous file there is untouched"));
    assert_null(strstr(tr_run_error(reg), "Input/output error"));
    tr_run_eval_end(reg, &ctx, &flow, 1.0);
    assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
    hk_destroy(reg);
    hk_ctx_free(&ctx);
    reg = hk_create(NULL);
    toy_init(&m, &ctx);
    assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .save_model = toy_save, .load_model = toy_load,
                                                       .model_user = &m }), TR_OK);
    assert_int_equal(tr_run_load(reg, &ctx, path), TR_OK);
    assert_int_equal(ctx.global_step, 3);
    assert_int_equal(ctx.batch_idx, 2); /* the last training batch, not the validation's 7 */
    hk_destroy(reg);
    hk_ctx_free(&ctx);
  }
}

/* The learning rate in a loop of your own: tr_run_lr gives the step's lr, a hook's tr_lr_scale lasts (and is
   in checkpoints), a hook that writes ctx->lr itself is told once which call keeps it. */
static int g_lr_hook_mode; /* 1: tr_lr_scale(0.5) at step 2; 2: ctx->lr = 1 at steps 2 and 4 */
static hk_signal lr_hook(hk_ctx *ctx, void *user) {
  (void)user;
  if (g_lr_hook_mode == 1 && ctx->global_step == 2) assert_int_equal(tr_lr_scale(ctx, 0.5), TR_OK);
  if (g_lr_hook_mode == 2 && (ctx->global_step == 2 || ctx->global_step == 4)) ctx->lr = 1.0;
  return HK_CONTINUE;
}
static double lr_loop(int mode, const char *log_path, double *lrs, int n) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  toy m;
  FILE *log = fopen(log_path, "w");
  int i;
  g_lr_hook_mode = mode;
  toy_init(&m, &ctx);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .log = log, .log_every_n_steps = -1 }), TR_OK);
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_BATCH_END, lr_hook, NULL, NULL, NULL), HK_OK);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  g_toy_lr_given = 1;
  for (i = 0; i < n; i++) {
    lrs[i] = tr_run_lr(reg, &ctx, 0.1); /* the loop's schedule: a constant */
    toy_step(reg, &ctx, &flow, &m);
    (void)tr_run_batch_end(reg, &ctx, &flow);
  }
  g_toy_lr_given = 0;
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  hk_destroy(reg);
  hk_ctx_free(&ctx);
  fclose(log);
  return lrs[n - 1];
}
static void test_lr_from_hooks(void **state) {
  char path[600], *text;
  double lrs[6];
  (void)state;
  snprintf(path, sizeof path, "%s/lr_log.txt", g_root);
  lr_loop(1, path, lrs, 6);
  assert_true(lrs[0] == 0.1 && lrs[1] == 0.1); /* steps 0, 1 */
  assert_true(lrs[2] == 0.05 && lrs[5] == 0.05); /* scaled at the end of step 2's batch: from the next on */
  text = slurp(path);
  assert_null(strstr(text, "ctx->lr"));
  free(text);
  lr_loop(2, path, lrs, 6);
  assert_true(lrs[5] == 0.1);                    /* a write of ctx->lr lasts one step */
  text = slurp(path);
  assert_non_null(strstr(text, "ctx->lr was written (= 1, by a hook or the loop) where the step's learning rate was 0.1"));
  assert_non_null(strstr(text, "tr_lr_set(ctx, lr)"));
  assert_int_equal(count_lines(text), 1);        /* once per run */
  free(text);
  { /* train.h's schedules: the hooks' scale applied once */
    hk_registry *reg = hk_create(NULL);
    hk_ctx ctx;
    toy m;
    tr_sched sc;
    char why[200];
    toy_init(&m, &ctx);
    assert_int_equal(tr_sched_parse(&sc, "step(step_size=2, gamma=0.5)", why, sizeof why), TR_OK);
    assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO }), TR_OK);
    assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
    assert_true(tr_run_sched_lr(reg, &ctx, &sc, 0.1, 3) == 0.05 && ctx.lr == 0.05);
    assert_int_equal(tr_lr_scale(&ctx, 0.5), TR_OK);
    assert_true(tr_run_sched_lr(reg, &ctx, &sc, 0.1, 4) == 0.1 * 0.25 * 0.5);
    assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
    hk_destroy(reg);
    hk_ctx_free(&ctx);
  }
}


/* An epoch loop: tr_run_epoch_start fires on_train_epoch_start and says where the epoch starts; a checkpoint
   records where in the loop it was written, so that a resume runs nothing twice. */
static int g_epoch_starts;
static hk_signal count_epoch_start(hk_ctx *ctx, void *user) { (void)ctx; (void)user; g_epoch_starts++; return HK_CONTINUE; }
static void epoch_batch(hk_registry *reg, hk_ctx *ctx, hk_flow *flow, int64_t b) {
  ctx->batch_idx = b;
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, ctx, flow);
  ctx->loss = 1.0;
  ctx->global_step++;
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, ctx, flow);
  assert_int_equal(tr_run_batch_end(reg, ctx, flow), 0);
}
static hk_registry *epoch_reg(toy *m) {
  hk_registry *reg = hk_create(NULL);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .max_epochs = 3, .log_every_n_steps = -1, .save_model = toy_save,
                                                     .load_model = toy_load, .model_user = m, .no_resume_message = 1 }), TR_OK);
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_EPOCH_START, count_epoch_start, NULL, NULL, NULL), HK_OK);
  return reg;
}
/* A new process's run resumed from path (the loop's model m, its context ctx), and its end. */
static hk_registry *epoch_resumed(toy *m, hk_ctx *ctx, const char *path) {
  hk_registry *reg;
  toy_init(m, ctx);
  reg = epoch_reg(m);
  g_epoch_starts = 0;
  assert_int_equal(tr_run_start(reg, ctx, path), TR_OK);
  return reg;
}
static void epoch_finish(hk_registry *reg, hk_ctx *ctx) {
  assert_int_equal(tr_run_finish(reg, ctx, TR_OK), TR_OK);
  hk_destroy(reg);
  hk_ctx_free(ctx);
}
static void test_epoch_loop_resume(void **state) {
  char mid[600], val[600], end[600];
  hk_registry *reg;
  hk_ctx ctx;
  hk_flow flow = { 0 };
  toy m;
  int64_t b;
  int e;
  (void)state;
  snprintf(mid, sizeof mid, "%s/epoch_mid.ckpt", g_root);
  snprintf(val, sizeof val, "%s/epoch_val.ckpt", g_root);
  snprintf(end, sizeof end, "%s/epoch_end.ckpt", g_root);
  toy_init(&m, &ctx);
  reg = epoch_reg(&m);
  g_epoch_starts = 0;
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  for (e = 0; e < 2; e++, ctx.epoch++) {
    ctx.batch_idx = 99;                                     /* stale: the last validation's, say */
    assert_int_equal(tr_run_epoch_start(reg, &ctx, &flow, 6), 0);
    assert_int_equal(ctx.batch_idx, 0);                     /* the bar counts from the epoch's start */
    assert_int_equal(tr_run_get(reg)->train_batches, 6);
    for (b = 0; b < 6; b++) {
      epoch_batch(reg, &ctx, &flow, b);
      if (e == 1 && b == 3) {
        assert_int_equal(tr_run_save(reg, &ctx, mid), TR_OK);
        toy_validate(reg, &ctx, &flow, 0.5);
        assert_int_equal(tr_run_batch_end(reg, &ctx, &flow), 0);
        assert_int_equal(tr_run_save(reg, &ctx, val), TR_OK);
      }
    }
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_EPOCH_END, &ctx, &flow);
    assert_int_equal(tr_run_epoch_end(reg, &ctx, &flow), 0);
    if (e == 1) assert_int_equal(tr_run_save(reg, &ctx, end), TR_OK);
  }
  assert_int_equal(g_epoch_starts, 2);
  epoch_finish(reg, &ctx);

  /* in the middle of epoch 1, after batch 3: the epoch goes on at batch 4, its start not fired again */
  reg = epoch_resumed(&m, &ctx, mid);
  assert_int_equal(tr_run_get(reg)->resumed_at, TR_RUN_AT_BATCH);
  assert_true(ctx.epoch == 1 && ctx.global_step == 10);
  assert_false(tr_run_resumed_at(reg, TR_RUN_AT_VALIDATION));
  assert_int_equal(tr_run_epoch_start(reg, &ctx, &flow, 6), 4);
  assert_int_equal(ctx.batch_idx, 4);
  assert_int_equal(g_epoch_starts, 0);
  epoch_finish(reg, &ctx);

  /* after the validation at that step: the loop can tell, until the next batch starts */
  reg = epoch_resumed(&m, &ctx, val);
  assert_int_equal(tr_run_get(reg)->resumed_at, TR_RUN_AT_VALIDATION);
  assert_true(tr_run_resumed_at(reg, TR_RUN_AT_VALIDATION));
  assert_int_equal(tr_run_epoch_start(reg, &ctx, &flow, 6), 4);
  epoch_batch(reg, &ctx, &flow, 4);
  assert_false(tr_run_resumed_at(reg, TR_RUN_AT_VALIDATION));
  epoch_finish(reg, &ctx);

  /* at epoch 1's end: epoch 2 is next, from its first batch, its start fired */
  reg = epoch_resumed(&m, &ctx, end);
  assert_int_equal(tr_run_get(reg)->resumed_at, TR_RUN_AT_EPOCH_END);
  assert_true(ctx.epoch == 2 && ctx.batch_idx == 0 && ctx.global_step == 12);
  assert_int_equal(tr_run_epoch_start(reg, &ctx, &flow, 6), 0);
  assert_int_equal(g_epoch_starts, 1);
  epoch_finish(reg, &ctx);

  /* outside a run: refused, nothing to run */
  reg = epoch_reg(&m);
  toy_init(&m, &ctx);
  assert_int_equal(tr_run_epoch_start(reg, &ctx, &flow, 6), 6);
  assert_non_null(strstr(tr_run_error(reg), "tr_run_epoch_start: no run is going: call tr_run_start first"));
  hk_destroy(reg);
  hk_ctx_free(&ctx);
}


/* Ctrl-C in a loop of your own: the first stops after the step, its state saved to save_to (without one,
   tr_run_start says that nothing will be saved); a second one ends the process at once. */
static void test_ctrl_c_saves_and_second_kills(void **state) {
  char ckpt[600], logp[600], *text;
  hk_registry *reg;
  hk_ctx ctx;
  hk_flow flow = { 0 };
  toy m;
  FILE *log;
  float at_stop[4];
  pid_t pid;
  int st;
  (void)state;
  snprintf(ckpt, sizeof ckpt, "%s/interrupted.ckpt", g_root);
  snprintf(logp, sizeof logp, "%s/ctrl_c_log.txt", g_root);
  /* nothing registered and no save_to: nothing said, Ctrl-C left as the program had it */
  log = fopen(logp, "w");
  toy_init(&m, &ctx);
  reg = hk_create(NULL);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .log = log, .log_every_n_steps = -1, .save_model = toy_save,
                                                     .load_model = toy_load, .model_user = &m }), TR_OK);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  {
    struct sigaction now;
    assert_int_equal(sigaction(SIGINT, NULL, &now), 0);
    assert_true(now.sa_handler == SIG_DFL); /* the program's own */
  }
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  hk_destroy(reg);
  fclose(log);
  text = slurp(logp);
  assert_string_equal(text, "");
  free(text);
  /* a hook registered, without save_to: said once at the start */
  log = fopen(logp, "w");
  toy_init(&m, &ctx);
  reg = hk_create(NULL);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .log = log, .log_every_n_steps = -1, .save_model = toy_save,
                                                     .load_model = toy_load, .model_user = &m, .spec = "timer" }), TR_OK);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  hk_destroy(reg);
  hk_ctx_free(&ctx);
  fclose(log);
  text = slurp(logp);
  assert_non_null(strstr(text, "Ctrl-C or SIGTERM will stop the run after its current step without saving it: set tr_run_desc.save_to"));
  free(text);
  /* with save_to: Ctrl-C saves the step just ended, and the run resumes from it */
  toy_init(&m, &ctx);
  reg = hk_create(NULL);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .log_every_n_steps = -1, .save_model = toy_save,
                                                     .load_model = toy_load, .model_user = &m, .save_to = ckpt }), TR_OK);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  toy_step(reg, &ctx, &flow, &m);
  assert_int_equal(tr_run_batch_end(reg, &ctx, &flow), 0);
  raise(SIGINT);
  toy_step(reg, &ctx, &flow, &m);
  assert_true(tr_run_batch_end(reg, &ctx, &flow) & TR_RUN_STOP);
  memcpy(at_stop, m.p, sizeof at_stop);
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_ERR_INTERRUPTED);
  assert_non_null(strstr(tr_run_error(reg), "stopped after step 2; its state saved to "));
  hk_destroy(reg);
  hk_ctx_free(&ctx);
  toy_init(&m, &ctx);
  reg = hk_create(NULL);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .save_model = toy_save, .load_model = toy_load,
                                                     .model_user = &m, .no_resume_message = 1 }), TR_OK);
  assert_int_equal(tr_run_start(reg, &ctx, ckpt), TR_OK);
  assert_int_equal(ctx.global_step, 2);
  assert_memory_equal(m.p, at_stop, sizeof at_stop);
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  hk_destroy(reg);
  hk_ctx_free(&ctx);
  /* a second signal in the same step: the process ends by it, at once */
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    toy_init(&m, &ctx);
    reg = hk_create(NULL);
    if (tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .log = stderr }) || tr_run_start(reg, &ctx, NULL)) _exit(3);
    raise(SIGINT);
    raise(SIGINT); /* a step that hangs: the user presses Ctrl-C again */
    _exit(4);
  }
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGINT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_shared_dir_and_flush_at_destroy),
    cmocka_unit_test(test_lr_from_hooks),
    cmocka_unit_test(test_epoch_loop_resume),
    cmocka_unit_test(test_ctrl_c_saves_and_second_kills),
    cmocka_unit_test(test_records_from_context),
    cmocka_unit_test(test_save_load_own_format),
    cmocka_unit_test(test_requests_and_stops),
    cmocka_unit_test(test_misconfiguration),
    cmocka_unit_test(test_bar_and_print),
    cmocka_unit_test(test_print_rank_zero),
    cmocka_unit_test(test_bar_mid_epoch),
    cmocka_unit_test(test_spec_find),
    cmocka_unit_test(test_bad_setup),
    cmocka_unit_test(test_calls_before_start),
    cmocka_unit_test(test_one_error_channel),
    cmocka_unit_test(test_setup_refused_during_run),
    cmocka_unit_test(test_batch_end_forgotten),
    cmocka_unit_test(test_val_record_forgotten),
    cmocka_unit_test(test_nested_save_load_refused),
    cmocka_unit_test(test_calls_from_hooks_refused),
    cmocka_unit_test(test_calls_out_of_place),
  };
  return run_tests_in_dir(tests, "test_run", g_root);
}
