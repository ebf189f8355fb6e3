/* tests/test_callbacks.c - train.h's standard callbacks early_stopping, model_checkpoint and timer.

   A model whose validation loss follows a script (script[i] at the i-th check: by epoch, or by
   validation when validating every few steps) replays fixed metric sequences; each test asserts the
   outcome Lightning 2.6 has (reference/lightning.md section 5, loggers.md section 3), or the
   documented difference: which epoch early stopping stops at and why, which files exist after each
   epoch, the best path and score, ties, NaN, min_epochs, resume, a rerun into the same directory,
   bad parameters (constructor and spec string), exact resume with all three registered, and two
   processes saving into one dirpath at once (names claimed on disk, never each other's files). */
#define TEST_NO_FSYNC /* what it checks needs no flush to the disk (tests/test.h) */
#include "test.h"

#include <dirent.h>

static char g_root[256]; /* a private temporary directory; each test works in a subdirectory */

/* ---- the scripted model ------------------------------------------------------------------------- */
#define NB 4 /* training batches per epoch */
typedef struct sc {
  float p[2], g[2];
  tr_trainer *t;
  const double *script;
  int n;
  int64_t by_step;          /* > 0: the i-th check is the validation at step (i+1)*by_step */
  double clock;             /* the fake clock: +1 s per training forward */
  char dir[300];
  char files[64][1024];     /* directory listing after each epoch (recorded at on_train_epoch_start and at the end) */
  int n_files;
  memlog log;
  int batch;
} sc;

static double sc_val(sc *m) {
  int64_t i = m->by_step > 0 ? m->t->global_step / m->by_step - 1 : m->t->epoch;
  if (i < 0) i = 0;
  return m->script[i < m->n ? i : m->n - 1];
}
static int sc_forward(void *user, void *batch, int training, double *loss) {
  sc *m = (sc *)user;
  (void)batch;
  if (training) { m->clock += 1.0; *loss = 1.0 + (double)m->p[0] * m->p[0]; }
  else *loss = sc_val(m);
  return 0;
}
static int sc_backward(void *user, void *batch) {
  sc *m = (sc *)user;
  (void)batch;
  m->g[0] += 2 * m->p[0];
  m->g[1] += 0.5f;
  return 0;
}
static int64_t sc_count(void *user) { (void)user; return NB; }
static int64_t sc_count1(void *user) { (void)user; return 1; }
static int sc_get(void *user, int64_t i, void **batch) { (void)i; *batch = user; return 0; }
static double sc_now(void *user) { return ((sc *)user)->clock; }

static int cmp_str(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }
/* "a b c": the directory's entries, sorted; symlinks marked "->target" */
static void list_dir(const char *dir, char *out, size_t cap) {
  char names[64][256];
  int n = 0, i;
  size_t len = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  out[0] = 0;
  if (!d) return;
  while ((e = readdir(d)) && n < 64) {
    if (e->d_name[0] == '.') continue;
    snprintf(names[n++], sizeof names[0], "%s", e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof names[0], cmp_str);
  for (i = 0; i < n; i++) {
    char full[600], target[256];
    ssize_t k;
    if (snprintf(full, sizeof full, "%s/%s", dir, names[i]) >= (int)sizeof full) continue;
    k = readlink(full, target, sizeof target - 1);
    if (k >= 0) target[k] = 0;
    len += (size_t)snprintf(out + len, cap - len, "%s%s%s%s", i ? " " : "", names[i], k >= 0 ? "->" : "", k >= 0 ? target : "");
    if (len >= cap) { out[cap - 1] = 0; return; }
  }
}
static hk_signal record_files(hk_ctx *ctx, void *user) {
  sc *m = (sc *)user;
  (void)ctx;
  if (m->n_files < 64) list_dir(m->dir, m->files[m->n_files++], sizeof m->files[0]);
  return HK_CONTINUE;
}

static void rm_rf(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  if (!d) return;
  while ((e = readdir(d))) {
    char full[600];
    struct stat st;
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (snprintf(full, sizeof full, "%s/%s", dir, e->d_name) >= (int)sizeof full) continue;
    if (lstat(full, &st) == 0 && S_ISDIR(st.st_mode)) { rm_rf(full); rmdir(full); }
    else unlink(full);
  }
  closedir(d);
}

static tr_data g_train, g_val;
static int g_n = 0; /* test directory counter */

/* A trainer over the scripted model, logging into memory, with a fresh directory m->dir. */
static void sc_init(sc *m, tr_trainer *t, const double *script, int n, int64_t by_step) {
  memset(m, 0, sizeof *m);
  m->p[0] = 0.5f;
  m->t = t;
  m->script = script;
  m->n = n;
  m->by_step = by_step;
  snprintf(m->dir, sizeof m->dir, "%s/t%d", g_root, ++g_n);
  rm_rf(m->dir);
  memlog_open(&m->log);
  assert_int_equal(tr_init(t, &(tr_desc){ .model = { .params = m->p, .grads = m->g, .n_params = 2, .user = m,
                                                     .forward = sc_forward, .backward = sc_backward },
                                          .optim = { .kind = TR_OPTIM_SGD, .lr = 0.1 }, .seed = 3, .log = m->log.f }), TR_OK);
  g_train = test_data(sc_count, sc_get, m);
  g_val = test_data(sc_count1, sc_get, m);
}
static void sc_record(sc *m, tr_trainer *t) {
  hk_on(t->reg, HK_ON_TRAIN_EPOCH_START, record_files, m, &(hk_opts){ .name = "record_files" }, NULL);
}
static const char *sc_logtext(sc *m) { return memlog_text(&m->log); }
static void sc_free(sc *m, tr_trainer *t) {
  tr_free(t);
  memlog_close(&m->log);
}
static tr_config sc_cfg(int64_t max_epochs) { return test_config(&g_train, &g_val, max_epochs); }
static void in_dir(const sc *m, char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", m->dir, name); }

/* =================================================================================================
   early_stopping
   ================================================================================================= */
static void test_es_patience(void **state) {
  static const double v[] = { 5, 4, 4.5, 4.4, 4.6, 3, 2 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(20);
  const tr_early_stopping_state *es;
  (void)state;
  sc_init(&m, &t, v, 7, 0);
  assert_int_equal(tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/loss", .patience = 2, .verbose = 1 }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  es = tr_early_stopping_get(t.reg, h);
  assert_non_null(es);
  /* best 4 at epoch 1; epochs 2 and 3 do not improve: stop at the check of epoch 3 (patience counts checks) */
  assert_int_equal(t.epoch, 4);
  assert_int_equal(es->stopped_epoch, 3);
  assert_int_equal(es->wait_count, 2);
  assert_true(es->best_score == 4.0);
  assert_int_equal(es->stopping_reason, TR_STOP_PATIENCE_EXHAUSTED);
  assert_string_equal(tr_stop_reason_name(es->stopping_reason), "patience_exhausted");
  assert_non_null(strstr(es->stopping_reason_message, "did not improve in the last 2 records. Best score: 4.000"));
  assert_non_null(strstr(sc_logtext(&m), "Signaling Trainer to stop"));
  assert_null(tr_model_checkpoint_get(t.reg, h)); /* the getters check the type */
  sc_free(&m, &t);
}

/* patience 0 (TR_ZERO / spec patience=0): the first check without improvement stops; ties do not improve */
static void test_es_ties_and_zero_patience(void **state) {
  static const double v[] = { 5, 5, 5, 5 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(20);
  (void)state;
  sc_init(&m, &t, v, 4, 0);
  assert_int_equal(tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/loss", .patience = TR_ZERO }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(tr_early_stopping_get(t.reg, h)->stopped_epoch, 1); /* 5 == 5 is no improvement */
  assert_int_equal(t.epoch, 2);
  sc_free(&m, &t);
}

static void test_es_min_delta_and_max(void **state) {
  static const double v[] = { 5, 4.6, 4.4, 4.3, 4.2 };
  static const double acc[] = { 0.5, 0.6, 0.64, 0.63, 0.645, 0.9 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(20);
  const tr_early_stopping_state *es;
  (void)state;
  /* min_delta 0.5 (min): 4.6 is not 0.5 better than 5; 4.4 is (strictly: 4.4 + 0.5 < 5) */
  sc_init(&m, &t, v, 5, 0);
  assert_int_equal(tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/loss", .min_delta = 0.5, .patience = 2 }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  es = tr_early_stopping_get(t.reg, h);
  assert_true(es->best_score == 4.4);
  assert_int_equal(es->stopped_epoch, 4); /* 4.3 and 4.2 are within min_delta of 4.4 */
  sc_free(&m, &t);
  /* mode max with min_delta 0.05 (its sign flips): 0.6 improves on 0.5 (0.6-0.05 > 0.5); 0.64, 0.63, 0.645 do not */
  sc_init(&m, &t, acc, 6, 0);
  assert_int_equal(tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/loss", .mode = TR_MODE_MAX, .min_delta = 0.05,
                                                                    .patience = 3 }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  es = tr_early_stopping_get(t.reg, h);
  assert_true(es->best_score == 0.6);
  assert_int_equal(es->stopped_epoch, 4);
  sc_free(&m, &t);
}

static void test_es_thresholds(void **state) {
  static const double down[] = { 5, 4, 2.5, 2.4, 2 };
  static const double up[] = { 5, 4, 7, 11, 1 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(20);
  const tr_early_stopping_state *es;
  (void)state;
  /* stopping_threshold 2.5: reaching it exactly does not stop (strict), 2.4 does */
  sc_init(&m, &t, down, 5, 0);
  assert_int_equal(tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/loss", .patience = 10,
                   .has_stopping_threshold = 1, .stopping_threshold = 2.5 }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  es = tr_early_stopping_get(t.reg, h);
  assert_int_equal(es->stopped_epoch, 3);
  assert_int_equal(es->stopping_reason, TR_STOP_STOPPING_THRESHOLD);
  assert_true(es->best_score == 2.5); /* a threshold stop does not update the best */
  assert_non_null(strstr(es->stopping_reason_message, "Stopping threshold reached: val/loss = 2.4 < 2.5"));
  sc_free(&m, &t);
  /* divergence_threshold 10: 11 > 10 stops at epoch 3 */
  sc_init(&m, &t, up, 5, 0);
  assert_int_equal(tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/loss", .patience = 10,
                   .has_divergence_threshold = 1, .divergence_threshold = 10 }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  es = tr_early_stopping_get(t.reg, h);
  assert_int_equal(es->stopped_epoch, 3);
  assert_int_equal(es->stopping_reason, TR_STOP_DIVERGENCE_THRESHOLD);
  sc_free(&m, &t);
}

static void test_es_nan(void **state) {
  static const double v[] = { 5, NAN, 4, 6, 7 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(20);
  const tr_early_stopping_state *es;
  (void)state;
  sc_init(&m, &t, v, 5, 0);
  assert_int_equal(tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/loss" }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  es = tr_early_stopping_get(t.reg, h);
  assert_int_equal(es->stopped_epoch, 1);
  assert_int_equal(es->stopping_reason, TR_STOP_NON_FINITE_METRIC);
  assert_non_null(strstr(es->stopping_reason_message, "is not finite. Previous best value was 5.000"));
  sc_free(&m, &t);
  /* check_finite off: NaN is never an improvement; it counts as a check without one */
  sc_init(&m, &t, v, 5, 0);
  assert_int_equal(tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/loss", .check_finite = TR_NO, .patience = 2 }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  es = tr_early_stopping_get(t.reg, h);
  assert_true(es->best_score == 4.0);
  assert_int_equal(es->stopped_epoch, 4);
  sc_free(&m, &t);
}

/* Lightning issue 19966: patience=2, min_epochs=6, val = 5,4,4.5,4.4,3,2 -> Lightning stops after epoch 5
   although the metric improved since its decision. Here the decision is made again at each check. */
static void test_es_min_epochs_not_latched(void **state) {
  static const double improves[] = { 5, 4, 4.5, 4.4, 3, 2, 2.5, 2.6, 2.7 };
  static const double stalls[] = { 5, 4, 4.5, 4.4, 4.6, 4.7, 4.8, 4.9 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(20);
  const tr_early_stopping_state *es;
  (void)state;
  c.min_epochs = 6;
  sc_init(&m, &t, improves, 9, 0);
  assert_int_equal(tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/loss", .patience = 2 }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  es = tr_early_stopping_get(t.reg, h);
  assert_true(es->best_score == 2.0);
  assert_int_equal(es->stopped_epoch, 7); /* 2.5, 2.6 after the best 2.0 at epoch 5 */
  assert_int_equal(t.epoch, 8);
  assert_int_equal(es->held, 0);
  sc_free(&m, &t);
  /* without improvement it stops exactly when min_epochs allows: after epoch 5 (6 epochs) */
  sc_init(&m, &t, stalls, 8, 0);
  assert_int_equal(tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/loss", .patience = 2, .verbose = 1 }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  es = tr_early_stopping_get(t.reg, h);
  assert_int_equal(t.epoch, 6);
  assert_int_equal(es->stopped_epoch, 5);
  assert_int_equal(es->wait_count, 4);
  assert_non_null(strstr(sc_logtext(&m), "held: min_epochs/min_steps not reached"));
  sc_free(&m, &t);
}

static void test_es_strict(void **state) {
  static const double v[] = { 5, 4, 3 };
  sc m;
  tr_trainer t;
  tr_config c = sc_cfg(3);
  (void)state;
  sc_init(&m, &t, v, 3, 0);
  assert_int_equal(tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/acc" }, NULL), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_ERR_HOOK);
  assert_non_null(strstr(tr_error(&t), "the monitored metric 'val/acc' is not set"));
  assert_non_null(strstr(tr_error(&t), "val/loss")); /* it lists what there is */
  sc_free(&m, &t);
  sc_init(&m, &t, v, 3, 0);
  assert_int_equal(tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/acc", .strict = TR_NO, .verbose = 1 }, NULL), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(t.epoch, 3);
  assert_non_null(strstr(sc_logtext(&m), "'val/acc' is not set; check skipped"));
  sc_free(&m, &t);
}

/* Validation twice per epoch (every 2 of 4 steps): Lightning's default then checks at validation end,
   and patience counts validations. */
static void test_es_validation_end(void **state) {
  static const double v[] = { 5, 4, 4.1, 4.2, 4.3 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(20);
  const tr_early_stopping_state *es;
  (void)state;
  c.val_every_n_steps = 2;
  sc_init(&m, &t, v, 5, 2);
  assert_int_equal(tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/loss", .patience = 3 }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  es = tr_early_stopping_get(t.reg, h);
  assert_int_equal(t.global_step, 10);  /* 3 validations without improvement after step 4: steps 6, 8, 10 */
  assert_int_equal(es->stopped_epoch, 2);
  sc_free(&m, &t);
  /* forced to the epoch's end: one check per epoch, at epochs 0, 1, 2, 3 with values 4, 4.2, 4.3, 4.3 */
  sc_init(&m, &t, v, 5, 2);
  assert_int_equal(tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/loss", .patience = 3,
                   .check_on_train_epoch_end = TR_YES }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(tr_early_stopping_get(t.reg, h)->stopped_epoch, 3);
  sc_free(&m, &t);
}

/* =================================================================================================
   model_checkpoint
   ================================================================================================= */
static void test_mc_top_k(void **state) {
  static const double v[] = { 5, 3, 4, 1, 2, 3 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(6);
  const tr_model_checkpoint_state *s;
  char path[600];
  (void)state;
  sc_init(&m, &t, v, 6, 0);
  sc_record(&m, &t);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss", .save_top_k = 2,
                   .filename = "{epoch}-{val/loss:.2f}", .verbose = 1 }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  record_files(NULL, &m);
  /* files after each epoch (listed at the next epoch's start, and at the end) */
  assert_int_equal(m.n_files, 7);
  assert_string_equal(m.files[0], "");
  assert_string_equal(m.files[1], "epoch=0-val_loss=5.00.ckpt");
  assert_string_equal(m.files[2], "epoch=0-val_loss=5.00.ckpt epoch=1-val_loss=3.00.ckpt");
  assert_string_equal(m.files[3], "epoch=1-val_loss=3.00.ckpt epoch=2-val_loss=4.00.ckpt");
  assert_string_equal(m.files[4], "epoch=1-val_loss=3.00.ckpt epoch=3-val_loss=1.00.ckpt");
  assert_string_equal(m.files[5], "epoch=3-val_loss=1.00.ckpt epoch=4-val_loss=2.00.ckpt");
  assert_string_equal(m.files[6], "epoch=3-val_loss=1.00.ckpt epoch=4-val_loss=2.00.ckpt"); /* 3 is not in the top 2 */
  s = tr_model_checkpoint_get(t.reg, h);
  in_dir(&m, path, sizeof path, "epoch=3-val_loss=1.00.ckpt");
  assert_string_equal(s->best_model_path, path);
  assert_true(s->best_model_score == 1.0);
  in_dir(&m, path, sizeof path, "epoch=4-val_loss=2.00.ckpt");
  assert_string_equal(s->kth_best_model_path, path);
  assert_true(s->kth_value == 2.0);
  assert_int_equal(s->n_best_k, 2);
  assert_string_equal(s->best_k_paths[1], path);
  assert_true(s->best_k_scores[0] == 1.0 && s->best_k_scores[1] == 2.0);
  assert_string_equal(s->last_model_path, "");
  assert_int_equal(s->last_global_step_saved, 20);
  assert_non_null(strstr(sc_logtext(&m), "'val/loss' was not in top 2"));
  sc_free(&m, &t);
}

/* Resuming from a top-k file (issue 28 item 16): the file stays while it is among the k best and is
   deleted when it falls out, as every top-k file (Lightning never deletes it: k+1 files for good). A
   copy of it elsewhere, handed to the fit, is never touched. */
static void test_mc_resumed_file_managed(void **state) {
  static const double v[] = { 5, 4, 6, 3, 2, 7 };
  sc m;
  tr_trainer t;
  tr_config c = sc_cfg(3);
  char dir[300], ckpt[600];
  (void)state;
  sc_init(&m, &t, v, 6, 0);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss", .save_top_k = 2,
                   .filename = "{epoch}" }, NULL), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "epoch=0.ckpt epoch=1.ckpt");
  snprintf(dir, sizeof dir, "%s", m.dir);
  in_dir(&m, ckpt, sizeof ckpt, "epoch=1.ckpt"); /* the best, written after epoch 1: the fit goes on at epoch 2 */
  sc_free(&m, &t);

  sc_init(&m, &t, v, 6, 0);
  rmdir(m.dir);
  snprintf(m.dir, sizeof m.dir, "%s", dir);
  sc_record(&m, &t);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss", .save_top_k = 2,
                   .filename = "{epoch}" }, NULL), TR_OK);
  c = sc_cfg(6);
  c.resume_from = ckpt;
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  record_files(NULL, &m);
  /* after epochs 2 (6: not kept), 3 (3: evicts epoch 0's 5), 4 (2: evicts epoch 1's 4, the resumed file), 5 (7) */
  assert_int_equal(m.n_files, 5);
  assert_string_equal(m.files[1], "epoch=0.ckpt epoch=1.ckpt");
  assert_string_equal(m.files[2], "epoch=1.ckpt epoch=3.ckpt"); /* still in the top 2: kept */
  assert_string_equal(m.files[3], "epoch=3.ckpt epoch=4.ckpt"); /* out of it: deleted */
  assert_string_equal(m.files[4], "epoch=3.ckpt epoch=4.ckpt");
  sc_free(&m, &t);
}

/* Retention (issue 39 item 4): keep_last_n=2 newest and every keep_every_n=3rd for good, beside save_top_k=1
   (without a monitor: the newest). The files after each epoch; then the same run stopped after 4 epochs
   and resumed from its newest file ends with the same files (the lists are in the checkpoints). */
static void test_mc_retention(void **state) {
  static const double v[] = { 5, 4, 6, 3, 2, 7, 1 };
  static const char *const want[8] = { "", "epoch=0.ckpt", "epoch=0.ckpt epoch=1.ckpt", "epoch=1.ckpt epoch=2.ckpt",
                                       "epoch=2.ckpt epoch=3.ckpt", "epoch=2.ckpt epoch=3.ckpt epoch=4.ckpt",
                                       "epoch=2.ckpt epoch=4.ckpt epoch=5.ckpt", "epoch=2.ckpt epoch=5.ckpt epoch=6.ckpt" };
  const tr_model_checkpoint_desc d = { .filename = "{epoch}", .keep_last_n = 2, .keep_every_n = 3 };
  tr_model_checkpoint_desc dd = d;
  sc m;
  tr_trainer t;
  tr_config c = sc_cfg(7);
  char dir[300], ckpt[600], foreign[600];
  int i;
  FILE *f;
  (void)state;
  sc_init(&m, &t, v, 7, 0);
  sc_record(&m, &t);
  dd.dirpath = m.dir;
  assert_int_equal(tr_model_checkpoint(t.reg, &dd, NULL), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  record_files(NULL, &m);
  assert_int_equal(m.n_files, 8);
  for (i = 0; i < 8; i++) assert_string_equal(m.files[i], want[i]);
  sc_free(&m, &t);

  /* 4 epochs, then resumed from epoch=3.ckpt to 7; a file of the user's named like the callback's stays */
  sc_init(&m, &t, v, 7, 0);
  dd.dirpath = m.dir;
  assert_int_equal(tr_model_checkpoint(t.reg, &dd, NULL), TR_OK);
  c = sc_cfg(4);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], want[4]);
  snprintf(dir, sizeof dir, "%s", m.dir);
  in_dir(&m, ckpt, sizeof ckpt, "epoch=3.ckpt");
  in_dir(&m, foreign, sizeof foreign, "notes.txt");
  assert_non_null(f = fopen(foreign, "w"));
  fclose(f);
  sc_free(&m, &t);
  sc_init(&m, &t, v, 7, 0);
  rmdir(m.dir);
  snprintf(m.dir, sizeof m.dir, "%s", dir);
  sc_record(&m, &t);
  dd.dirpath = m.dir;
  assert_int_equal(tr_model_checkpoint(t.reg, &dd, NULL), TR_OK);
  c = sc_cfg(7);
  c.resume_from = ckpt;
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  record_files(NULL, &m);
  assert_int_equal(m.n_files, 4);
  for (i = 1; i < 4; i++) {
    char with[300];
    snprintf(with, sizeof with, "%s notes.txt", want[4 + i]);
    assert_string_equal(m.files[i], with);
  }
  sc_free(&m, &t);

  /* with a monitor: the best (save_top_k=1) and the 2 newest, saved whatever their rank */
  {
    static const char *const ranked[8] = { "", "epoch=0.ckpt", "epoch=0.ckpt epoch=1.ckpt", "epoch=1.ckpt epoch=2.ckpt",
                                           "epoch=2.ckpt epoch=3.ckpt", "epoch=3.ckpt epoch=4.ckpt",
                                           "epoch=4.ckpt epoch=5.ckpt", "epoch=5.ckpt epoch=6.ckpt" };
    const tr_model_checkpoint_state *st;
    hk_handle h;
    char best[600];
    sc_init(&m, &t, v, 7, 0);
    sc_record(&m, &t);
    dd = d;
    dd.dirpath = m.dir;
    dd.monitor = "val/loss";
    dd.keep_every_n = 0;
    assert_int_equal(tr_model_checkpoint(t.reg, &dd, &h), TR_OK);
    c = sc_cfg(7);
    assert_int_equal(tr_fit(&t, &c), TR_OK);
    record_files(NULL, &m);
    assert_int_equal(m.n_files, 8);
    for (i = 0; i < 8; i++) assert_string_equal(m.files[i], ranked[i]);
    st = tr_model_checkpoint_get(t.reg, h);
    in_dir(&m, best, sizeof best, "epoch=6.ckpt");
    assert_string_equal(st->best_model_path, best);
    assert_int_equal(st->n_best_k, 1); /* the top k ranks only what is in it */
    sc_free(&m, &t);
    dd = d;
  }

  /* refused at setup: what would keep nothing more */
  sc_init(&m, &t, v, 7, 0);
  dd.save_top_k = -1;
  assert_int_equal(tr_model_checkpoint(t.reg, &dd, NULL), TR_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(t.reg), "save_top_k=-1 keeps every file already"));
  assert_int_equal(hk_spec_apply(t.reg, "model_checkpoint(keep_last_n=-2)"), HK_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(t.reg), "keep_last_n=-2 and keep_every_n=0 must be 0 (off) or more"));
  sc_free(&m, &t);
}

/* resume_from "auto" in tr_fit (issue 39 item 3): the first fit finds nothing (a fresh start); after 3 epochs a
   second trainer resumes the newest checkpoint of model_checkpoint's directory that loads (a corrupt file named
   newer is skipped, said in one line) and ends as an uninterrupted 6-epoch fit. */
static void test_resume_auto_fit(void **state) {
  static const double v[] = { 5, 4, 6, 3, 2, 7 };
  sc m;
  tr_trainer t;
  tr_config c = sc_cfg(3);
  char dir[300], bad[600];
  float p_full[2];
  int64_t step_full;
  FILE *f;
  (void)state;
  sc_init(&m, &t, v, 6, 0); /* the uninterrupted fit */
  c = sc_cfg(6);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  memcpy(p_full, m.p, sizeof p_full);
  step_full = t.global_step;
  sc_free(&m, &t);

  sc_init(&m, &t, v, 6, 0);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .filename = "{epoch}",
                   .save_last = TR_SAVE_LAST_YES }, NULL), TR_OK);
  c = sc_cfg(3);
  c.resume_from = "auto";
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_non_null(strstr(sc_logtext(&m), "resume auto: no checkpoint of this run was found: a fresh start"));
  snprintf(dir, sizeof dir, "%s", m.dir);
  in_dir(&m, bad, sizeof bad, "epoch=9.ckpt");
  assert_non_null(f = fopen(bad, "w"));
  fputs("not a checkpoint", f);
  fclose(f);
  sc_free(&m, &t);

  sc_init(&m, &t, v, 6, 0);
  rmdir(m.dir);
  snprintf(m.dir, sizeof m.dir, "%s", dir);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .filename = "{epoch}",
                   .save_last = TR_SAVE_LAST_YES }, NULL), TR_OK);
  c = sc_cfg(6);
  c.resume_from = "auto";
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_non_null(strstr(sc_logtext(&m), "epoch=9.ckpt: not a train.h checkpoint"));
  assert_non_null(strstr(sc_logtext(&m), "resume auto: resuming "));
  assert_non_null(strstr(sc_logtext(&m), "Restored all states from the checkpoint at ")); /* epochs 3-5 only, from it */
  assert_non_null(strstr(sc_logtext(&m), ": epoch 3, global step "));
  assert_int_equal(t.global_step, step_full);
  assert_memory_equal(m.p, p_full, sizeof p_full);
  sc_free(&m, &t);
}

/* Without a dirpath, checkpoints go into the run directory's checkpoints/ when a logger made one
   (version_N/checkpoints, as Lightning): a second run in the same place gets its own directory, no
   -v1 names beside the first run's files, which stay as they were. Without a logger: ./checkpoints. */
static void test_mc_default_dir(void **state) {
  static const double v[] = { 5, 3, 4 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(3);
  char want[400], first[2048], listing[2048], cwd[512], here[600];
  (void)state;
  sc_init(&m, &t, v, 3, 0);
  assert_int_equal(tr_run_setup(t.reg, &(tr_run_desc){ .save_dir = m.dir }), TR_OK);
  assert_int_equal(hk_spec_apply(t.reg, "csv; model_checkpoint(monitor=val/loss, save_top_k=2, save_last=true)"), HK_OK);
  h = hk_spec_find(t.reg, "model_checkpoint", 0);
  assert_string_equal(tr_model_checkpoint_get(t.reg, h)->dirpath, "checkpoints"); /* before the fit: not known yet */
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  snprintf(want, sizeof want, "%s/lightning_logs/version_0/checkpoints", m.dir);
  assert_string_equal(tr_model_checkpoint_get(t.reg, h)->dirpath, want);
  list_dir(want, first, sizeof first);
  assert_string_equal(first, "epoch=1-step=8.ckpt epoch=2-step=12.ckpt last.ckpt");
  snprintf(here, sizeof here, "%s/last.ckpt", want);
  assert_string_equal(tr_model_checkpoint_get(t.reg, h)->last_model_path, here);
  tr_free(&t);
  /* the same program again, in the same place: version_1/checkpoints, the same names, no -v1 */
  m.p[0] = 0.5f;
  assert_int_equal(tr_init(&t, &(tr_desc){ .model = { .params = m.p, .grads = m.g, .n_params = 2, .user = &m, .forward = sc_forward,
                   .backward = sc_backward }, .optim = { .kind = TR_OPTIM_SGD, .lr = 0.1 }, .seed = 3, .log = m.log.f }), TR_OK);
  assert_int_equal(tr_run_setup(t.reg, &(tr_run_desc){ .save_dir = m.dir }), TR_OK);
  assert_int_equal(hk_spec_apply(t.reg, "csv; model_checkpoint(monitor=val/loss, save_top_k=2, save_last=true)"), HK_OK);
  h = hk_spec_find(t.reg, "model_checkpoint", 0);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  snprintf(here, sizeof here, "%s/lightning_logs/version_1/checkpoints", m.dir);
  assert_string_equal(tr_model_checkpoint_get(t.reg, h)->dirpath, here);
  list_dir(here, listing, sizeof listing);
  assert_string_equal(listing, first);
  list_dir(want, listing, sizeof listing);
  assert_string_equal(listing, first); /* the first run's files: untouched */
  tr_free(&t);
  /* no logger, no run directory: ./checkpoints, in the working directory */
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(m.dir), 0);
  m.p[0] = 0.5f;
  assert_int_equal(tr_init(&t, &(tr_desc){ .model = { .params = m.p, .grads = m.g, .n_params = 2, .user = &m, .forward = sc_forward,
                   .backward = sc_backward }, .optim = { .kind = TR_OPTIM_SGD, .lr = 0.1 }, .seed = 3, .log = m.log.f }), TR_OK);
  assert_int_equal(hk_spec_apply(t.reg, "model_checkpoint(monitor=val/loss)"), HK_OK);
  h = hk_spec_find(t.reg, "model_checkpoint", 0);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_string_equal(tr_model_checkpoint_get(t.reg, h)->best_model_path, "checkpoints/epoch=1-step=8.ckpt");
  assert_int_equal(access("checkpoints/epoch=1-step=8.ckpt", F_OK), 0);
  assert_int_equal(chdir(cwd), 0);
  sc_free(&m, &t);
}

/* ties are not better than the k-th; NaN is never best and is evicted first */
static void test_mc_ties_and_nan(void **state) {
  static const double v[] = { 5, NAN, 4, 4, 4 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(5);
  const tr_model_checkpoint_state *s;
  char path[600];
  (void)state;
  sc_init(&m, &t, v, 5, 0);
  sc_record(&m, &t);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss", .save_top_k = 2,
                   .filename = "{epoch}" }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  record_files(NULL, &m);
  assert_string_equal(m.files[2], "epoch=0.ckpt epoch=1.ckpt");     /* NaN is kept while fewer than k ... */
  assert_string_equal(m.files[3], "epoch=0.ckpt epoch=2.ckpt");     /* ... and evicted first */
  assert_string_equal(m.files[4], "epoch=2.ckpt epoch=3.ckpt");     /* 4 beats 5 */
  assert_string_equal(m.files[5], "epoch=2.ckpt epoch=3.ckpt");     /* 4 ties the k-th 4: not saved */
  s = tr_model_checkpoint_get(t.reg, h);
  in_dir(&m, path, sizeof path, "epoch=2.ckpt");
  assert_string_equal(s->best_model_path, path);                   /* the first of equal bests */
  sc_free(&m, &t);
  /* a NaN first: Lightning would call it best (stored as inf); here best stays empty until a number */
  {
    static const double w[] = { NAN, 3 };
    sc_init(&m, &t, w, 2, 0);
    assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss", .save_top_k = 2 }, &h), TR_OK);
    c.max_epochs = 1;
    assert_int_equal(tr_fit(&t, &c), TR_OK);
    s = tr_model_checkpoint_get(t.reg, h);
    assert_string_equal(s->best_model_path, "");
    assert_true(isnan(s->best_model_score));
    assert_int_equal(s->n_best_k, 1);
    c.max_epochs = 2;
    assert_int_equal(tr_fit(&t, &c), TR_OK);
    in_dir(&m, path, sizeof path, "epoch=1-step=8.ckpt");
    assert_string_equal(s->best_model_path, path);
    assert_true(s->best_model_score == 3.0);
    sc_free(&m, &t);
  }
}

/* no monitor: save_top_k 1 keeps the newest (the same name is overwritten), -1 keeps all; TR_ZERO only last */
static void test_mc_no_monitor_and_last(void **state) {
  static const double v[] = { 5 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(3);
  char path[600];
  const tr_model_checkpoint_state *s;
  (void)state;
  sc_init(&m, &t, v, 1, 0);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "epoch=2-step=12.ckpt");
  s = tr_model_checkpoint_get(t.reg, h);
  in_dir(&m, path, sizeof path, "epoch=2-step=12.ckpt");
  assert_string_equal(s->best_model_path, path);
  sc_free(&m, &t);

  sc_init(&m, &t, v, 1, 0);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .filename = "same" }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "same.ckpt"); /* overwritten, no -v1 without a monitor */
  sc_free(&m, &t);

  sc_init(&m, &t, v, 1, 0);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .save_top_k = -1,
                   .save_last = TR_SAVE_LAST_YES }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "epoch=0-step=4.ckpt epoch=1-step=8.ckpt epoch=2-step=12.ckpt last.ckpt");
  in_dir(&m, path, sizeof path, "last.ckpt");
  assert_string_equal(tr_model_checkpoint_get(t.reg, h)->last_model_path, path);
  sc_free(&m, &t);

  sc_init(&m, &t, v, 1, 0);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .save_top_k = TR_ZERO,
                   .save_last = TR_SAVE_LAST_LINK }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "last.ckpt"); /* a real file: there is nothing to link to */
  sc_free(&m, &t);
}

/* two validations per epoch with filename {epoch}: the second gets -v1 (Lightning) */
static void test_mc_validation_twice_per_epoch(void **state) {
  static const double v[] = { 5, 4, 3, 2 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(2);
  (void)state;
  c.val_every_n_steps = 2;
  sc_init(&m, &t, v, 4, 2);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss",
                   .save_top_k = -1, .filename = "{epoch}" }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "epoch=0-v1.ckpt epoch=0.ckpt epoch=1-v1.ckpt epoch=1.ckpt");
  assert_int_equal(tr_model_checkpoint_get(t.reg, h)->n_best_k, 4);
  assert_true(tr_model_checkpoint_get(t.reg, h)->best_model_score == 2.0);
  sc_free(&m, &t);
}

/* a second run into the same directory: -v1 names, last-v1.ckpt; nothing of the first run is deleted */
static void test_mc_rerun_same_dir(void **state) {
  static const double v[] = { 5, 3 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(2);
  char dir[300];
  tr_model_checkpoint_desc d;
  (void)state;
  sc_init(&m, &t, v, 2, 0);
  snprintf(dir, sizeof dir, "%s", m.dir);
  memset(&d, 0, sizeof d);
  d.dirpath = dir;
  d.monitor = "val/loss";
  d.save_last = TR_SAVE_LAST_YES;
  assert_int_equal(tr_model_checkpoint(t.reg, &d, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  sc_free(&m, &t);
  list_dir(dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "epoch=1-step=8.ckpt last.ckpt");
  /* the rerun */
  sc_init(&m, &t, v, 2, 0);
  rmdir(m.dir);
  snprintf(m.dir, sizeof m.dir, "%s", dir);
  assert_int_equal(tr_model_checkpoint(t.reg, &d, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  list_dir(dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "epoch=1-step=8-v1.ckpt epoch=1-step=8.ckpt last-v1.ckpt last.ckpt");
  sc_free(&m, &t);
}

static void test_mc_every_n_train_steps_and_time(void **state) {
  static const double v[] = { 5 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(3);
  (void)state;
  sc_init(&m, &t, v, 1, 0);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .save_top_k = -1,
                   .every_n_train_steps = 5, .save_last = TR_SAVE_LAST_YES }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  /* steps 5 and 10; no epoch saves; last at step 10, and again at the end (step 12, on_train_end) */
  assert_string_equal(m.files[0], "epoch=1-step=5.ckpt epoch=2-step=10.ckpt last.ckpt");
  assert_int_equal(tr_model_checkpoint_get(t.reg, h)->last_global_step_saved, 12);
  sc_free(&m, &t);
  /* every 3 seconds of the fake clock (+1 s per training batch, checked after each batch) */
  sc_init(&m, &t, v, 1, 0);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .save_top_k = -1,
                   .train_time_interval = 3, .clock = sc_now, .clock_user = &m, .filename = "{step}" }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "step=12.ckpt step=3.ckpt step=6.ckpt step=9.ckpt");
  sc_free(&m, &t);
  /* a step save whose metric does not exist yet waits for the next validation (no sanity check here) */
  sc_init(&m, &t, v, 1, 0);
  c.num_sanity_val_steps = -1;
  c.max_epochs = 1;
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss",
                   .every_n_train_steps = 2, .filename = "{step}" }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "step=4.ckpt");
  sc_free(&m, &t);
}

/* mode max, every_n_epochs 2, at validation end, without the version counter */
static void test_mc_max_every_2_epochs(void **state) {
  static const double acc[] = { 0.5, 0.6, 0.7, 0.65, 0.9, 0.95 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(6);
  const tr_model_checkpoint_state *s;
  char path[600];
  (void)state;
  sc_init(&m, &t, acc, 6, 0);
  sc_record(&m, &t);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss", .mode = TR_MODE_MAX,
                   .every_n_epochs = 2, .save_on_train_epoch_end = TR_NO, .filename = "best", .enable_version_counter = TR_NO }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  record_files(NULL, &m);
  /* saves after epochs 1, 3, 5 (the 2nd, 4th, 6th): 0.6, then 0.65 > 0.6 replaces it under the same name */
  assert_string_equal(m.files[1], "");
  assert_string_equal(m.files[2], "best.ckpt");
  s = tr_model_checkpoint_get(t.reg, h);
  assert_true(s->best_model_score == 0.95);
  assert_int_equal(s->n_best_k, 1);
  in_dir(&m, path, sizeof path, "best.ckpt");
  assert_string_equal(s->best_model_path, path);
  assert_string_equal(m.files[6], "best.ckpt");
  sc_free(&m, &t);
}

/* a checkpoint from another directory restores only best_model_path (Lightning); bad state is refused */
static void test_mc_state_load(void **state) {
  static const double v[] = { 5, 3 };
  sc m;
  tr_trainer t;
  hk_handle h, h2, h3;
  tr_config c = sc_cfg(2);
  char ckpt[600], other[700], best[600];
  static const unsigned char junk[] = { 1, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255 };
  (void)state;
  sc_init(&m, &t, v, 2, 0);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss",
                   .save_last = TR_SAVE_LAST_YES }, &h), TR_OK);
  assert_int_equal(tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/loss" }, &h2), TR_OK);
  assert_int_equal(tr_timer(t.reg, &(tr_timer_desc){ 0 }, &h3), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  snprintf(ckpt, sizeof ckpt, "%s", tr_model_checkpoint_get(t.reg, h)->last_model_path);
  snprintf(best, sizeof best, "%s", tr_model_checkpoint_get(t.reg, h)->best_model_path);
  /* each callback rejects a blob that is not its own format */
  assert_int_equal(hk_state_load(t.reg, "early_stopping{monitor=val/loss,mode=min}", junk, sizeof junk), HK_ERR_STATE);
  assert_int_equal(hk_state_load(t.reg, "timer", junk, sizeof junk), HK_ERR_STATE);
  assert_int_equal(hk_state_load(t.reg, hk_callback_get(t.reg, h)->name, junk, sizeof junk), HK_ERR_STATE);
  assert_int_equal(tr_model_checkpoint_get(t.reg, h)->n_best_k, 1); /* unchanged */
  sc_free(&m, &t);
  sc_init(&m, &t, v, 2, 0);
  snprintf(other, sizeof other, "%s/other", m.dir);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = other, .monitor = "val/loss",
                   .save_last = TR_SAVE_LAST_YES }, &h), TR_OK);
  assert_int_equal(tr_load(&t, ckpt), TR_OK);
  assert_string_equal(tr_model_checkpoint_get(t.reg, h)->best_model_path, best);
  assert_int_equal(tr_model_checkpoint_get(t.reg, h)->n_best_k, 0);
  assert_string_equal(tr_model_checkpoint_get(t.reg, h)->last_model_path, "");
  assert_non_null(strstr(sc_logtext(&m), "only best_model_path is restored"));
  sc_free(&m, &t);
}

/* ---- loaded states are range-checked (issue 18) ----------------------------------------------------
   Every stateful callback refuses a state whose fields are out of range, naming the field and the valid
   range, as tr_load does for the LOOP counters; a refused state leaves the callback as it was. The two
   overflows found with UBSan (this test also runs in the ASan+UBSan build, with float-cast-overflow):
   early_stopping loaded with wait_count = patience = INT64_MAX overflowed at its next check, and a timer
   loaded with 1.8e161 s elapsed overflowed a cast in its verbose message. */
typedef struct sbytes { unsigned char b[512]; size_t n; } sbytes; /* a state, as a checkpoint holds it */
static void put64(sbytes *x, uint64_t v) { int i; for (i = 0; i < 8; i++) x->b[x->n++] = (unsigned char)(v >> (8 * i)); }
static void putf(sbytes *x, double d) { uint64_t u; memcpy(&u, &d, 8); put64(x, u); }
static void putstr(sbytes *x, const char *str) {
  size_t i, n = strlen(str);
  for (i = 0; i < 4; i++) x->b[x->n++] = (unsigned char)(n >> (8 * i));
  memcpy(x->b + x->n, str, n);
  x->n += n;
}
static sbytes es_state(int64_t wait, int64_t stopped, double best, int64_t patience) {
  sbytes x = { { 0 }, 0 };
  put64(&x, 1); put64(&x, (uint64_t)wait); put64(&x, (uint64_t)stopped); putf(&x, best); put64(&x, (uint64_t)patience);
  put64(&x, 0); putstr(&x, ""); put64(&x, 0);
  return x;
}
static void expect_refused(hk_registry *reg, const char *key, const sbytes *x, const char *needle) {
  assert_int_equal(hk_state_load(reg, key, x->b, x->n), HK_ERR_STATE);
  if (!strstr(hk_last_error(reg), needle)) fail_msg("state of '%s': error '%s' lacks '%s'", key, hk_last_error(reg), needle);
}
static hk_signal clock_jump(hk_ctx *ctx, void *user) { (void)ctx; ((sc *)user)->clock = 1e300; return HK_CONTINUE; }
static void test_state_ranges(void **state) {
  static const double v[] = { 5, 5, 5, 5, 5, 5 };
  static const char *const es_key = "early_stopping{monitor=val/loss,mode=min}";
  sc m;
  tr_trainer t;
  hk_handle hes, htm, hmc, hng, hema, hlrf;
  tr_config c = sc_cfg(3);
  sbytes x;
  const char *mc_key;
  char mc_name[300];
  (void)state;
  sc_init(&m, &t, v, 6, 0);
  assert_int_equal(tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/loss", .patience = 2 }, &hes), TR_OK);
  assert_int_equal(tr_timer(t.reg, &(tr_timer_desc){ .duration = "00:00:00:10", .clock = sc_now, .clock_user = &m, .verbose = 1 }, &htm), TR_OK);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss" }, &hmc), TR_OK);
  assert_int_equal(tr_nan_guard(t.reg, &(tr_nan_guard_desc){ 0 }, &hng), TR_OK);
  assert_int_equal(tr_ema(t.reg, &(tr_ema_desc){ 0 }, &hema), TR_OK);
  assert_int_equal(tr_lr_finder(t.reg, &(tr_lr_finder_desc){ 0 }, &hlrf), TR_OK);
  snprintf(mc_name, sizeof mc_name, "%s", hk_callback_get(t.reg, hmc)->name);
  mc_key = mc_name;

  /* early_stopping: the counters as the LOOP counters (0..2^53), patience as its constructor (0..INT_MAX) */
  x = es_state(INT64_MAX, 0, -INFINITY, INT64_MAX);
  expect_refused(t.reg, es_key, &x, "wait_count is 9223372036854775807, outside 0..2^53");
  x = es_state(5, 0, -INFINITY, INT64_MAX);
  expect_refused(t.reg, es_key, &x, "patience is 9223372036854775807, outside 0..2147483647");
  x = es_state(-1, 0, 1.0, 3);
  expect_refused(t.reg, es_key, &x, "wait_count is -1, outside 0..2^53");
  x = es_state(0, INT64_MAX, 1.0, 3);
  expect_refused(t.reg, es_key, &x, "stopped_epoch is 9223372036854775807");
  x = es_state(0, 0, NAN, 3);
  expect_refused(t.reg, es_key, &x, "best_score is NaN");
  x = es_state(0, 0, 1.0, 3);
  x.n--;
  expect_refused(t.reg, es_key, &x, "held is truncated or not 0 or 1");
  x = es_state(0, 0, 1.0, 3);
  x.b[x.n++] = 0;
  expect_refused(t.reg, es_key, &x, "1 bytes after the end of the state");
  x = es_state(0, 0, 1.0, 3);
  x.b[0] = 2;
  expect_refused(t.reg, es_key, &x, "state version 2; this build reads version 1");
  assert_int_equal(tr_early_stopping_get(t.reg, hes)->patience, 2); /* unchanged by the refusals */
  /* the largest values it accepts cannot overflow: wait_count 2^53 counts on, patience INT_MAX */
  x = es_state((int64_t)1 << 53, 0, -INFINITY, INT32_MAX);
  assert_int_equal(hk_state_load(t.reg, es_key, x.b, x.n), HK_OK);

  /* timer: every stage's elapsed time finite and in 0..2^53 s */
  x.n = 0;
  put64(&x, 1); putf(&x, 1.8e161); putf(&x, 0); putf(&x, 0); putf(&x, 0); putf(&x, 0);
  expect_refused(t.reg, "timer", &x, "time/train is 1.8e+161 s, outside 0..2^53 s");
  x.n = 0;
  put64(&x, 1); putf(&x, 0); putf(&x, 0); putf(&x, -1); putf(&x, 0); putf(&x, 0);
  expect_refused(t.reg, "timer", &x, "time/validate is -1 s");
  x.n = 0;
  put64(&x, 1); putf(&x, 0); putf(&x, 0); putf(&x, 0); putf(&x, INFINITY); putf(&x, 0);
  expect_refused(t.reg, "timer", &x, "time/test is inf s");
  assert_true(tr_timer_get(t.reg, htm)->time_elapsed[TR_TIMER_TRAIN] == 0);

  /* model_checkpoint: last_global_step_saved in -1..2^53 */
  x.n = 0;
  put64(&x, 1); putstr(&x, m.dir); putstr(&x, ""); putf(&x, NAN); putstr(&x, ""); putf(&x, NAN); putstr(&x, ""); putf(&x, NAN);
  put64(&x, (uint64_t)INT64_MAX); putstr(&x, ""); put64(&x, 0);
  expect_refused(t.reg, mc_key, &x, "last_global_step_saved is 9223372036854775807, outside -1..2^53");
  x.n -= 20; /* step, newest, n */
  put64(&x, 3); putstr(&x, ""); put64(&x, 1000);
  expect_refused(t.reg, mc_key, &x, "best_k_models has 1000 entries");

  /* nan_guard: the counters in 0..2^53, skipped <= found */
  x.n = 0;
  put64(&x, 1); put64(&x, (uint64_t)INT64_MAX); put64(&x, 0); putstr(&x, "");
  expect_refused(t.reg, "nan_guard", &x, "found is 9223372036854775807, outside 0..2^53");
  x.n = 0;
  put64(&x, 1); put64(&x, 1); put64(&x, 2); putstr(&x, "");
  expect_refused(t.reg, "nan_guard", &x, "skipped (2) is more than found (1)");

  /* ema: n_averaged in 0..2^53, the average's size consistent with it */
  x.n = 0;
  put64(&x, 1); put64(&x, (uint64_t)INT64_MAX); put64(&x, 1); putf(&x, 0); x.n -= 4;
  expect_refused(t.reg, "ema", &x, "n_averaged is 9223372036854775807");
  x.n = 0;
  put64(&x, 1); put64(&x, 3); put64(&x, 0);
  expect_refused(t.reg, "ema", &x, "n_averaged is 3 but the average holds 0 values");

  /* lr_finder: a suggestion is a learning rate (finite, > 0) or NaN */
  x.n = 0;
  put64(&x, 1); put64(&x, 1); putf(&x, INFINITY);
  expect_refused(t.reg, "lr_finder", &x, "suggestion is inf; a learning rate is finite and > 0");
  x.n = 0;
  put64(&x, 1); put64(&x, 2); putf(&x, 0.1);
  expect_refused(t.reg, "lr_finder", &x, "done is truncated or not 0 or 1");
  assert_int_equal(hk_off(t.reg, hlrf), HK_OK); /* (it would sweep in the fit below) */

  /* the reason reaches tr_load's message through hk_state_load_all */
  {
    hk_state_blob b;
    x = es_state(INT64_MAX, 0, -INFINITY, INT64_MAX);
    memset(&b, 0, sizeof b);
    b.key = es_key;
    b.data = x.b;
    b.len = x.n;
    assert_int_equal(hk_state_load_all(t.reg, &b, 1), HK_ERR_STATE);
    assert_non_null(strstr(hk_last_error(t.reg), "wait_count is 9223372036854775807, outside 0..2^53; the callbacks loaded before it were restored"));
  }

  /* the fit runs from the largest accepted values: no overflow (UBSan); patience is exhausted at the first check */
  x = es_state((int64_t)1 << 53, 0, -INFINITY, INT32_MAX);
  assert_int_equal(hk_state_load(t.reg, es_key, x.b, x.n), HK_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(t.global_step, NB);
  assert_true(tr_early_stopping_get(t.reg, hes)->wait_count == ((int64_t)1 << 53) + 1);
  assert_int_equal(tr_early_stopping_get(t.reg, hes)->stopping_reason, TR_STOP_PATIENCE_EXHAUSTED);
  sc_free(&m, &t);

  /* a timer loaded with the largest accepted time stops at fit start; its message has no overflowing cast */
  sc_init(&m, &t, v, 6, 0);
  assert_int_equal(tr_timer(t.reg, &(tr_timer_desc){ .duration = "00:00:00:10", .clock = sc_now, .clock_user = &m, .verbose = 1 }, &htm), TR_OK);
  x.n = 0;
  put64(&x, 1); putf(&x, (double)((int64_t)1 << 53)); putf(&x, 0); putf(&x, 0); putf(&x, 0); putf(&x, 0);
  assert_int_equal(hk_state_load(t.reg, "timer", x.b, x.n), HK_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_non_null(strstr(sc_logtext(&m), "Time limit reached. Elapsed time is 2501999792983:36:32."));
  assert_int_equal(t.global_step, 0);
  sc_free(&m, &t);

  /* a user clock that jumps past what a long long holds: the message prints seconds, no cast */
  sc_init(&m, &t, v, 6, 0);
  assert_int_equal(tr_timer(t.reg, &(tr_timer_desc){ .duration = "00:00:00:10", .clock = sc_now, .clock_user = &m, .verbose = 1 }, &htm), TR_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_TRAIN_BATCH_START, clock_jump, &m, NULL, NULL), HK_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_non_null(strstr(sc_logtext(&m), "Time limit reached. Elapsed time is 1e+300 s."));
  assert_int_equal(t.global_step, 1);
  sc_free(&m, &t);
}

/* templates: formats, missing metrics as 0, auto_insert off, '/' never makes a directory */
static hk_signal set_metrics(hk_ctx *ctx, void *user) {
  (void)user;
  hk_metric_set(ctx, "val/acc", 0.875);
  hk_metric_set(ctx, "n", 7);
  return HK_CONTINUE;
}
static void test_mc_templates(void **state) {
  static const double v[] = { 0.123456 };
  sc m;
  tr_trainer t;
  tr_config c = sc_cfg(1);
  (void)state;
  sc_init(&m, &t, v, 1, 0);
  hk_on(t.reg, HK_ON_VALIDATION_EPOCH_END, set_metrics, NULL, &(hk_opts){ .name = "set_metrics" }, NULL);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .save_top_k = -1,
                   .filename = "{epoch:03d}_{val/loss}_{val/acc:.1%}" }, NULL), TR_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(t.reg), "filename '{epoch:03d}_{val/loss}_{val/acc:.1%}' is not a valid template"));
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .save_top_k = -1,
                   .filename = "{epoch:03d}_{val/loss}_{val/acc:.3e}_{missing:.2f}_{n}_{step:5d}" }, NULL), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "epoch=000_val_loss=0.123456_val_acc=8.750e-01_missing=0.00_n=7.0_step=    4.ckpt");
  sc_free(&m, &t);
  sc_init(&m, &t, v, 1, 0);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir,
                   .filename = "model-{val/loss:.2f}", .auto_insert_metric_name = TR_NO }, NULL), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "model-0.12.ckpt");
  sc_free(&m, &t);
}

/* the monitored metric missing at an epoch save is an error naming it */
static void test_mc_missing_monitor(void **state) {
  static const double v[] = { 1 };
  sc m;
  tr_trainer t;
  tr_config c = sc_cfg(1);
  (void)state;
  sc_init(&m, &t, v, 1, 0);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/f1" }, NULL), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_ERR_HOOK);
  assert_non_null(strstr(tr_error(&t), "model_checkpoint: the monitored metric 'val/f1' is not set"));
  sc_free(&m, &t);
}

/* =================================================================================================
   timer
   ================================================================================================= */
static void test_timer(void **state) {
  static const double v[] = { 1 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(10);
  const tr_timer_state *s;
  double x;
  (void)state;
  sc_init(&m, &t, v, 1, 0);
  assert_int_equal(tr_timer(t.reg, &(tr_timer_desc){ .duration = "00:00:00:10", .clock = sc_now, .clock_user = &m, .verbose = 1 }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  s = tr_timer_get(t.reg, h);
  assert_true(s->duration == 10);
  assert_int_equal(t.global_step, 10); /* +1 s per batch, checked after each: 10 s after step 10 */
  assert_true(s->time_elapsed[TR_TIMER_TRAIN] == 10);
  assert_true(tr_timer_elapsed(t.reg, h, TR_TIMER_TRAIN) == 10);
  assert_true(hk_metric_get(&t.ctx, "time/train", &x) && x == 10);
  assert_true(hk_metric_get(&t.ctx, "time/validate", &x) && x == 0); /* validation takes no fake time */
  assert_true(hk_metric_get(&t.ctx, "time/sanity_check", &x));
  assert_non_null(strstr(sc_logtext(&m), "Time limit reached. Elapsed time is 0:00:10"));
  assert_true(tr_timer_elapsed(t.reg, 12345, TR_TIMER_TRAIN) < 0);
  /* standalone runs count as their stages, summed over runs */
  assert_int_equal(tr_validate(&t, &g_train, 0, NULL), TR_OK);  /* training batches: forward with training=0 */
  assert_int_equal(tr_test(&t, &g_val, 0, NULL), TR_OK);
  assert_true(s->time_elapsed[TR_TIMER_TEST] == 0 && s->time_elapsed[TR_TIMER_VALIDATE] == 0);
  assert_true(hk_metric_get(&t.ctx, "time/test", &x) && x == 0);
  sc_free(&m, &t);
  /* per epoch: checked after each epoch only */
  sc_init(&m, &t, v, 1, 0);
  assert_int_equal(tr_timer(t.reg, &(tr_timer_desc){ .seconds = 10, .interval = TR_INTERVAL_EPOCH, .clock = sc_now, .clock_user = &m }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(t.global_step, 12);
  sc_free(&m, &t);
}

/* =================================================================================================
   bad parameters: constructors and spec strings, before anything runs
   ================================================================================================= */
static void test_bad_parameters(void **state) {
  static const double v[] = { 1 };
  sc m;
  tr_trainer t;
  (void)state;
  sc_init(&m, &t, v, 1, 0);
  expect_bad(&t, tr_early_stopping(t.reg, &(tr_early_stopping_desc){ 0 }, NULL), "monitor is required");
  expect_bad(&t, tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "x", .patience = -1 }, NULL), "patience must be >= 0");
  expect_bad(&t, tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "x", .mode = (tr_mode)7 }, NULL), "mode 7 is not valid (min or max)");
  expect_bad(&t, tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "x", .min_delta = -1 }, NULL), "min_delta must be");
  expect_bad(&t, tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "x", .has_stopping_threshold = 1, .stopping_threshold = NAN }, NULL), "stopping_threshold");
  expect_bad(&t, tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .every_n_train_steps = 5, .every_n_epochs = 1 }, NULL), "mutually exclusive");
  expect_bad(&t, tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .every_n_train_steps = 5, .train_time_interval = 2 }, NULL), "mutually exclusive");
  expect_bad(&t, tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .save_top_k = -2 }, NULL), "save_top_k must be >= -1");
  expect_bad(&t, tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .save_top_k = 3 }, NULL), "save_top_k=3 needs a monitor");
  expect_bad(&t, tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .filename = "{epoch" }, NULL), "a '{' without its '}'");
  expect_bad(&t, tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .filename = "epoch}" }, NULL), "'}' without its '{'");
  expect_bad(&t, tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .filename = "{}" }, NULL), "an empty field name");
  expect_bad(&t, tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .filename = "{a:.q}" }, NULL), "a '.' without a precision");
  expect_bad(&t, tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .filename = "sub/{epoch}" }, NULL), "put directories in dirpath");
  expect_bad(&t, tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .mode = (tr_mode)2 }, NULL), "mode 2 is not valid");
  expect_bad(&t, tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .save_last = (tr_save_last)5 }, NULL), "save_last 5 is not valid");
  expect_bad(&t, tr_timer(t.reg, &(tr_timer_desc){ .duration = "12:00" }, NULL), "is not \"DD:HH:MM:SS\"");
  expect_bad(&t, tr_timer(t.reg, &(tr_timer_desc){ .duration = "00:01:00:00", .seconds = 5 }, NULL), "not both");
  expect_bad(&t, tr_timer(t.reg, &(tr_timer_desc){ .seconds = -1 }, NULL), "seconds must be");
  expect_bad(&t, tr_timer(t.reg, &(tr_timer_desc){ .interval = (tr_interval)3 }, NULL), "interval 3 is not valid (step or epoch)");
  /* the same through spec strings; nothing is registered (all or nothing) */
  expect_bad_spec(&t, "early_stopping(patience=3)", "monitor");
  expect_bad_spec(&t, "early_stopping(monitor=val/loss, mode=maximum)", "max");
  expect_bad_spec(&t, "early_stopping(monitor=val/loss, patience=-2)", "patience must be >= 0");
  expect_bad_spec(&t, "timer(seconds=5); early_stopping(monitor=val/loss, patience=-2)", "patience must be >= 0");
  expect_bad_spec(&t, "model_checkpoint(every_n_train_steps=10, every_n_epochs=2)", "mutually exclusive");
  expect_bad_spec(&t, "model_checkpoint(filename=\"{epoch\")", "not a valid template");
  expect_bad_spec(&t, "model_checkpoint(save_last=maybe)", "false|true|link");
  expect_bad_spec(&t, "timer(duration=1h)", "DD:HH:MM:SS");
  assert_int_equal(hk_find(t.reg, "timer"), 0);
  assert_int_equal(hk_count(t.reg, HK_ON_TRAIN_EPOCH_END), 0);
  /* two early stoppings on one metric and mode share a state key: refused */
  assert_int_equal(tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/loss" }, NULL), TR_OK);
  expect_bad(&t, tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/loss" }, NULL), "early_stopping{monitor=val/loss,mode=min}");
  assert_int_equal(tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/loss", .mode = TR_MODE_MAX }, NULL), TR_OK);
  sc_free(&m, &t);
}

/* =================================================================================================
   model_checkpoint: files are never lost (issue 18), Lightning's semantics where users rely on them
   ================================================================================================= */
/* model_checkpoint's state bytes (format 1), as a checkpoint would hold them */
typedef struct blob { unsigned char b[4096]; size_t n; } blob;
static void put_u64(blob *x, uint64_t v) { int i; for (i = 0; i < 8; i++) x->b[x->n++] = (unsigned char)(v >> (8 * i)); }
static void put_f64(blob *x, double v) { uint64_t u; memcpy(&u, &v, 8); put_u64(x, u); }
static void put_str(blob *x, const char *s) {
  size_t n = strlen(s), i;
  for (i = 0; i < 4; i++) x->b[x->n++] = (unsigned char)(n >> (8 * i));
  memcpy(x->b + x->n, s, n);
  x->n += n;
}
/* best_k = { kth: 100 }, kth = best = kth, last = last, newest = kth */
static void mc_state(blob *x, const char *dir, const char *kth, const char *last) {
  x->n = 0;
  put_u64(x, 1);
  put_str(x, dir);
  put_str(x, kth); put_f64(x, 100);
  put_str(x, kth); put_f64(x, 100);
  put_str(x, last); put_f64(x, 100);
  put_u64(x, 0); /* last_global_step_saved */
  put_str(x, kth);
  put_u64(x, 1);
  put_str(x, kth); put_f64(x, 100);
}
static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}
static int is_there(const char *path) { struct stat st; return lstat(path, &st) == 0; }

/* a checkpoint's state names files (checksums can be recomputed by anyone): only files this callback
   writes are ever removed - inside its dirpath, with its naming, regular files */
static void test_mc_state_never_deletes_others(void **state) {
  static const double v[] = { 5 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(1);
  char victims[7][900], outside[600], target[700];
  struct stat st;
  const char *last_victim;
  int i;
  blob x;
  (void)state;
  for (i = 0; i < 7; i++) {
    sc_init(&m, &t, v, 1, 0);
    assert_int_equal(mkdir(m.dir, 0777), 0);
    snprintf(outside, sizeof outside, "%s/outside%d", g_root, i);
    rm_rf(outside);
    assert_int_equal(mkdir(outside, 0777), 0);
    snprintf(target, sizeof target, "%s/target", outside);
    write_file(target, "precious");
    in_dir(&m, victims[0], sizeof victims[0], "precious.txt");                 /* not its naming */
    snprintf(victims[1], sizeof victims[1], "%s/epoch=0-step=9.ckpt", outside); /* its naming, another directory */
    snprintf(victims[2], sizeof victims[2], "%s/../outside%d/epoch=0-step=9.ckpt", m.dir, i); /* ... through '..' */
    in_dir(&m, victims[3], sizeof victims[3], "epoch=5-step=5.ckpt");          /* a directory */
    in_dir(&m, victims[4], sizeof victims[4], "epoch=6-step=6.ckpt");          /* a symlink */
    in_dir(&m, victims[5], sizeof victims[5], "epoch=7-step=7.ckpt");          /* a FIFO */
    in_dir(&m, victims[6], sizeof victims[6], "epoch=0-step=4.ckpt");          /* a symlink where the next save goes */
    write_file(victims[0], "precious");
    write_file(victims[1], "precious");
    assert_int_equal(mkdir(victims[3], 0777), 0);
    assert_int_equal(symlink(target, victims[4]), 0);
    assert_int_equal(mkfifo(victims[5], 0666), 0);
    assert_int_equal(symlink(target, victims[6]), 0);
    /* the state lists the victim as the k-th best (evicted by the first better save) and as last */
    last_victim = i == 4 || i == 6 ? victims[0] : victims[i];
    assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss",
                     .save_last = TR_SAVE_LAST_YES }, &h), TR_OK);
    mc_state(&x, m.dir, victims[i], last_victim);
    assert_int_equal(hk_state_load(t.reg, hk_callback_get(t.reg, h)->name, x.b, x.n), HK_OK);
    assert_int_equal(tr_model_checkpoint_get(t.reg, h)->n_best_k, 1);
    assert_int_equal(tr_fit(&t, &c), TR_OK);
    assert_true(is_there(victims[i]));
    assert_true(is_there(last_victim));
    assert_true(is_there(target));
    assert_true(lstat(victims[6], &st) == 0 && S_ISLNK(st.st_mode)); /* kept even as the file replaced (i == 6): -v1 */
    in_dir(&m, target, sizeof target, "epoch=0-step=4-v1.ckpt");
    assert_string_equal(tr_model_checkpoint_get(t.reg, h)->best_model_path, target);
    assert_int_equal(tr_model_checkpoint_get(t.reg, h)->n_best_k, 1);
    assert_non_null(strstr(sc_logtext(&m), "model_checkpoint: not removing"));
    sc_free(&m, &t);
    rm_rf(outside);
    rmdir(outside);
  }
}

/* filename=last with save_last: the top-k file and last.ckpt would be one file; refused */
static void test_mc_filename_last_refused(void **state) {
  static const double v[] = { 5 };
  sc m;
  tr_trainer t;
  tr_config c = sc_cfg(2);
  (void)state;
  sc_init(&m, &t, v, 1, 0);
  expect_bad(&t, tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .filename = "last",
             .save_last = TR_SAVE_LAST_YES }, NULL), "filename 'last' is save_last's name");
  expect_bad(&t, tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .filename = "last-v2", .monitor = "val/loss",
             .save_top_k = 2, .save_last = TR_SAVE_LAST_LINK }, NULL), "filename 'last-v2' is save_last's name");
  expect_bad_spec(&t, "model_checkpoint(filename=last, save_last=link)", "save_last's name");
  /* without save_last the name is free */
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .filename = "last" }, NULL), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "last.ckpt");
  sc_free(&m, &t);
}

/* two model_checkpoints in one directory never claim one name, and never delete each other's files */
static void test_mc_two_in_one_dir(void **state) {
  static const double v[] = { 5, 3, 4 };
  sc m;
  tr_trainer t;
  hk_handle top, all;
  tr_config c = sc_cfg(3);
  char path[600];
  (void)state;
  sc_init(&m, &t, v, 3, 0);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss",
                   .save_last = TR_SAVE_LAST_YES }, &top), TR_OK);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .save_top_k = -1,
                   .save_last = TR_SAVE_LAST_YES }, &all), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "epoch=0-step=4-v1.ckpt epoch=1-step=8-v1.ckpt epoch=1-step=8.ckpt epoch=2-step=12.ckpt "
                      "last-v1.ckpt last.ckpt"); /* 12: the top-1 one saved no file there */
  in_dir(&m, path, sizeof path, "epoch=1-step=8.ckpt");
  assert_string_equal(tr_model_checkpoint_get(t.reg, top)->best_model_path, path);
  in_dir(&m, path, sizeof path, "epoch=2-step=12.ckpt");
  assert_string_equal(tr_model_checkpoint_get(t.reg, all)->best_model_path, path);
  in_dir(&m, path, sizeof path, "last-v1.ckpt");
  assert_string_equal(tr_model_checkpoint_get(t.reg, all)->last_model_path, path);
  sc_free(&m, &t);
}

/* save_last=link is always the latest state: a save point without a top-k file writes a real file */
static void test_mc_last_link_is_latest(void **state) {
  static const double v[] = { 5, 3, 4 };
  sc m;
  tr_trainer t;
  tr_config c = sc_cfg(3);
  char path[600];
  (void)state;
  sc_init(&m, &t, v, 3, 0);
  sc_record(&m, &t);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss",
                   .filename = "{epoch}", .save_last = TR_SAVE_LAST_LINK }, NULL), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  record_files(NULL, &m);
  assert_string_equal(m.files[1], "epoch=0.ckpt last.ckpt->epoch=0.ckpt");
  assert_string_equal(m.files[2], "epoch=1.ckpt last.ckpt->epoch=1.ckpt");
  assert_string_equal(m.files[3], "epoch=1.ckpt last.ckpt"); /* 4 is not saved: last is a file of its own */
  in_dir(&m, path, sizeof path, "last.ckpt");
  assert_int_equal(tr_load(&t, path), TR_OK);
  assert_int_equal(t.global_step, 12); /* the latest state, not epoch 1's */
  assert_int_equal(t.epoch, 3);
  sc_free(&m, &t);
}

/* a step save where a validation runs at the same step is ranked on that validation's value */
static void test_mc_step_save_fresh_value(void **state) {
  static const double by_epoch[] = { 5, 1, 3 }, by_val[] = { 5, 1, 3, 2 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(3);
  char path[600];
  (void)state;
  /* every 4 steps = each epoch's last batch, where the epoch's validation follows */
  sc_init(&m, &t, by_epoch, 3, 0);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss",
                   .every_n_train_steps = 4, .filename = "{step}-{val/loss:.0f}" }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "step=8-val_loss=1.ckpt");
  assert_true(tr_model_checkpoint_get(t.reg, h)->best_model_score == 1.0);
  sc_free(&m, &t);
  /* every 2 steps with a validation every 2 steps */
  sc_init(&m, &t, by_val, 4, 2);
  c.max_epochs = 2;
  c.val_every_n_steps = 2;
  c.val_every_n_epochs = 1000;
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss",
                   .every_n_train_steps = 2, .filename = "{step}-{val/loss:.0f}" }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "step=4-val_loss=1.ckpt");
  in_dir(&m, path, sizeof path, "step=4-val_loss=1.ckpt");
  assert_string_equal(tr_model_checkpoint_get(t.reg, h)->best_model_path, path);
  sc_free(&m, &t);
}

/* the monitored metric missing before the first validation: a warning (and last.ckpt), not a failure */
static void test_mc_missing_before_first_validation(void **state) {
  static const double v[] = { 5, 4, 3, 2 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(4);
  (void)state;
  sc_init(&m, &t, v, 4, 0);
  c.val_every_n_epochs = 2;
  c.num_sanity_val_steps = -1;
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss", .save_top_k = -1,
                   .save_on_train_epoch_end = TR_YES, .filename = "{epoch}", .save_last = TR_SAVE_LAST_YES }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  /* epoch 0: warned (last.ckpt only); 1 and 3 after validations; 2 ranks on epoch 1's value (as Lightning) */
  assert_string_equal(m.files[0], "epoch=1.ckpt epoch=2.ckpt epoch=3.ckpt last.ckpt");
  assert_non_null(strstr(sc_logtext(&m), "model_checkpoint: the monitored metric 'val/loss' is not set"));
  assert_non_null(strstr(sc_logtext(&m), "no validation has run yet"));
  sc_free(&m, &t);
  /* the sanity check's val/loss is forgotten after it (Lightning resets its metrics): epoch 0 still waits */
  sc_init(&m, &t, v, 4, 0);
  c.num_sanity_val_steps = 1;
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss", .save_top_k = -1,
                   .save_on_train_epoch_end = TR_YES, .filename = "{epoch}", .save_last = TR_SAVE_LAST_YES }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "epoch=1.ckpt epoch=2.ckpt epoch=3.ckpt last.ckpt");
  sc_free(&m, &t);
  c.num_sanity_val_steps = -1;
  /* once a validation has run, a missing metric fails the run */
  sc_init(&m, &t, v, 4, 0);
  c.max_epochs = 2;
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/f1",
                   .save_on_train_epoch_end = TR_YES }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_ERR_HOOK);
  assert_int_equal(t.epoch, 1); /* epoch 0 warned; epoch 1 validated, then failed */
  assert_non_null(strstr(tr_error(&t), "model_checkpoint: the monitored metric 'val/f1' is not set"));
  sc_free(&m, &t);
}

/* keep-all names the worst kept file as the k-th (Lightning); no monitor keeps no best_k_models */
static void test_mc_kth_and_no_monitor_state(void **state) {
  static const double v[] = { 5, 3, 4 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(3);
  const tr_model_checkpoint_state *s;
  char path[600];
  (void)state;
  sc_init(&m, &t, v, 3, 0);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss",
                   .save_top_k = -1, .filename = "{epoch}" }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  s = tr_model_checkpoint_get(t.reg, h);
  in_dir(&m, path, sizeof path, "epoch=0.ckpt");
  assert_string_equal(s->kth_best_model_path, path);
  assert_true(s->kth_value == 5.0);
  assert_int_equal(s->n_best_k, 3);
  sc_free(&m, &t);
  /* no monitor, keep all and keep the newest: best_model_path is the newest; no best_k_models, no k-th */
  sc_init(&m, &t, v, 3, 0);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .save_top_k = -1,
                   .filename = "{epoch}" }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  s = tr_model_checkpoint_get(t.reg, h);
  in_dir(&m, path, sizeof path, "epoch=2.ckpt");
  assert_string_equal(s->best_model_path, path);
  assert_int_equal(s->n_best_k, 0);
  assert_string_equal(s->kth_best_model_path, "");
  assert_true(isnan(s->best_model_score));
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "epoch=0.ckpt epoch=1.ckpt epoch=2.ckpt");
  sc_free(&m, &t);
  sc_init(&m, &t, v, 3, 0);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .filename = "{epoch}" }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  s = tr_model_checkpoint_get(t.reg, h);
  assert_int_equal(s->n_best_k, 0);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "epoch=2.ckpt");
  sc_free(&m, &t);
}

/* a fixed name with save_top_k > 1 and no version counter: one entry, as the one file on disk */
static void test_mc_fixed_name_once(void **state) {
  static const double v[] = { 5, 3, 4 };
  sc m;
  tr_trainer t;
  hk_handle h;
  tr_config c = sc_cfg(3);
  const tr_model_checkpoint_state *s;
  char path[600];
  (void)state;
  sc_init(&m, &t, v, 3, 0);
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss",
                   .save_top_k = 2, .filename = "best", .enable_version_counter = TR_NO }, &h), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  s = tr_model_checkpoint_get(t.reg, h);
  assert_int_equal(s->n_best_k, 1);
  in_dir(&m, path, sizeof path, "best.ckpt");
  assert_string_equal(s->best_k_paths[0], path);
  assert_true(s->best_k_scores[0] == 4.0); /* the file holds epoch 2 */
  assert_string_equal(s->best_model_path, path);
  assert_true(s->best_model_score == 4.0);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "best.ckpt");
  sc_free(&m, &t);
}

/* parameter ranges named as they are; an empty filename refused */
static void test_mc_ranges_and_empty_filename(void **state) {
  static const double v[] = { 5 };
  sc m;
  tr_trainer t;
  hk_handle h;
  (void)state;
  sc_init(&m, &t, v, 1, 0);
  expect_bad(&t, tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .filename = "" }, NULL), "filename is empty");
  expect_bad_spec(&t, "model_checkpoint(filename=\"\")", "filename is empty");
  expect_bad(&t, tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .every_n_train_steps = -1 }, NULL),
             "every_n_train_steps=-1 is out of range: give 0 (no step saves) to 9223372036854775807");
  expect_bad(&t, tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .every_n_epochs = -3 }, NULL),
             "every_n_epochs=-3 is out of range: give 0 (no epoch saves) to 9223372036854775807");
  expect_bad(&t, tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .train_time_interval = -1 }, NULL),
             "train_time_interval=-1 is out of range: give 0 (no timed saves) or a finite number of seconds");
  expect_bad_spec(&t, "model_checkpoint(every_n_train_steps=-1)", "every_n_train_steps=-1 is out of range");
  expect_bad_spec(&t, "model_checkpoint(every_n_epochs=-2)", "every_n_epochs=-2 is out of range");
  assert_int_equal(hk_spec_apply(t.reg, "model_checkpoint(every_n_train_steps=9223372036854775807)"), HK_OK);
  h = hk_find(t.reg, "model_checkpoint{monitor=none,mode=min,every_n_train_steps=9223372036854775807,every_n_epochs=0,"
                     "train_time_interval=0}");
  assert_non_null(tr_model_checkpoint_get(t.reg, h));
  sc_free(&m, &t);
}

/* a hook's refused tr_load does not outlive the run that succeeded */
static hk_signal load_inside(hk_ctx *ctx, void *user) {
  tr_trainer *t = (tr_trainer *)ctx->trainer;
  (void)user;
  assert_int_equal(tr_load(t, "nowhere.ckpt"), TR_ERR_INVALID);
  assert_non_null(strstr(tr_error(t), "tr_load called during a fit run"));
  return HK_CONTINUE;
}
static void test_fit_ok_clears_refusal(void **state) {
  static const double v[] = { 5 };
  sc m;
  tr_trainer t;
  tr_config c = sc_cfg(1);
  (void)state;
  sc_init(&m, &t, v, 1, 0);
  hk_on(t.reg, HK_ON_TRAIN_START, load_inside, NULL, &(hk_opts){ .name = "load_inside" }, NULL);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_string_equal(tr_error(&t), "");
  sc_free(&m, &t);
}

/* what can be checked at setup is: an unusable directory (model_checkpoint's and on_exception_checkpoint's, by
   tr__probe_dir), a validation metric without validation */
static void test_mc_setup_checks(void **state) {
  static const double v[] = { 5 };
  sc m;
  tr_trainer t;
  tr_config c = sc_cfg(2);
  char dir[800], file[700];
  int oec;
  (void)state;
  for (oec = 0; oec < 2; oec++) { /* model_checkpoint, on_exception_checkpoint: the same check, the same words */
    sc_init(&m, &t, v, 1, 0);
    assert_int_equal(mkdir(m.dir, 0777), 0);
    in_dir(&m, file, sizeof file, "a-file");
    write_file(file, "x");
    snprintf(dir, sizeof dir, "%s/sub", file);
    if (oec) assert_int_equal(tr_on_exception_checkpoint(t.reg, &(tr_on_exception_checkpoint_desc){ .dirpath = dir }, NULL), TR_OK);
    else assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = dir }, NULL), TR_OK);
    assert_int_equal(tr_fit(&t, &c), TR_ERR_HOOK);
    assert_int_equal(t.global_step, 0); /* before the first step */
    if (!strstr(tr_error(&t), "' failed in on_fit_start: cannot create the directory '")) fail_msg("got: %s", tr_error(&t));
    assert_non_null(strstr(tr_error(&t), "/a-file/sub': Not a directory"));
    sc_free(&m, &t);
    { /* a directory it cannot write: without write permission, or (root writes anyway) a read-only mount */
      char cmd[900];
      int ro = 0;
      sc_init(&m, &t, v, 1, 0);
      assert_int_equal(mkdir(m.dir, geteuid() != 0 ? 0555 : 0777), 0);
      snprintf(cmd, sizeof cmd, "mount -t tmpfs -o ro,size=64k tmpfs '%s' 2>/dev/null", m.dir);
      if (geteuid() == 0) ro = system(cmd) == 0;
      if (geteuid() != 0 || ro) {
        if (oec) assert_int_equal(tr_on_exception_checkpoint(t.reg, &(tr_on_exception_checkpoint_desc){ .dirpath = m.dir }, NULL), TR_OK);
        else assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir }, NULL), TR_OK);
        assert_int_equal(tr_fit(&t, &c), TR_ERR_HOOK);
        assert_int_equal(t.global_step, 0);
        if (!strstr(tr_error(&t), "' failed in on_fit_start: the directory '")) fail_msg("got: %s", tr_error(&t));
        assert_non_null(strstr(tr_error(&t), "' is not writable: "));
        assert_non_null(strstr(tr_error(&t), oec ? "; the checkpoint of a failure could not be saved there"
                                                  : "; checkpoints could not be saved there"));
      }
      if (ro) {
        snprintf(cmd, sizeof cmd, "umount '%s'", m.dir);
        assert_int_equal(system(cmd), 0);
      }
      chmod(m.dir, 0777);
      sc_free(&m, &t);
    }
  }
  /* val/loss with no validation data: nothing will ever set it */
  sc_init(&m, &t, v, 1, 0);
  c.val = NULL;
  assert_int_equal(tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = m.dir, .monitor = "val/loss" }, NULL), TR_OK);
  assert_int_equal(tr_fit(&t, &c), TR_ERR_HOOK);
  assert_int_equal(t.global_step, 0);
  assert_non_null(strstr(tr_error(&t), "}' failed in on_fit_start: monitor 'val/loss' is a validation metric, but this run never validates"));
  sc_free(&m, &t);
}

/* spec strings work out of the box on the trainer's registry, and on a registry of one's own */
static void test_spec_strings(void **state) {
  static const double v[] = { 5, 3, 4, 4.5, 6 };
  sc m;
  tr_trainer t;
  tr_config c = sc_cfg(20);
  char spec[800];
  hk_registry *own;
  hk_handle h;
  (void)state;
  sc_init(&m, &t, v, 5, 0);
  snprintf(spec, sizeof spec, "early_stopping(monitor=val/loss, patience=2); model_checkpoint(dirpath=\"%s\", "
           "monitor=val/loss, save_top_k=2, filename=\"{epoch}-{val/loss:.1f}\"); timer(duration=\"01:00:00:00\")", m.dir);
  assert_int_equal(hk_spec_apply(t.reg, spec), HK_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(t.epoch, 4); /* best 3 at epoch 1; 4 and 4.5 do not improve */
  h = hk_find(t.reg, "early_stopping{monitor=val/loss,mode=min}");
  assert_int_equal(tr_early_stopping_get(t.reg, h)->stopped_epoch, 3);
  list_dir(m.dir, m.files[0], sizeof m.files[0]);
  assert_string_equal(m.files[0], "epoch=1-val_loss=3.0.ckpt epoch=2-val_loss=4.0.ckpt");
  assert_non_null(tr_timer_get(t.reg, hk_find(t.reg, "timer")));
  sc_free(&m, &t);

  /* a registry of the user's, handed to tr_init after tr_add_factories: tr_init keeps what is there */
  own = hk_create(NULL);
  assert_int_equal(tr_add_factories(own), HK_OK);
  {
    tr_trainer t2;
    tr_desc d;
    memset(&d, 0, sizeof d);
    d.model.params = m.p;
    d.model.grads = m.g;
    d.model.n_params = 2;
    d.model.forward = sc_forward;
    d.model.backward = sc_backward;
    d.reg = own;
    assert_int_equal(tr_init(&t2, &d), TR_OK);
    assert_int_equal(hk_spec_apply(own, "timer(seconds=1, interval=epoch)"), HK_OK);
    assert_non_null(tr_timer_get(own, hk_find(own, "timer")));
    assert_int_equal(hk_spec_apply(own, "timer"), HK_ERR_INVALID); /* one timer per registry (its state key) */
    assert_non_null(strstr(hk_last_error(own), "timer"));
    tr_free(&t2); /* not the user's registry */
  }
  hk_destroy(own);
  own = hk_create(NULL);
  assert_int_equal(tr_add_factories(own), HK_OK);
  assert_int_equal(tr_add_factories(own), HK_OK); /* again: the names are there, nothing changes */
  assert_int_equal(hk_spec_check(own, "early_stopping(monitor=loss, patience=0, check_on_train_epoch_end=true)"), HK_OK);
  assert_int_equal(hk_spec_apply(own, "early_stopping(monitor=loss, patience=0, check_on_train_epoch_end=true)"), HK_OK);
  h = hk_find(own, "early_stopping{monitor=loss,mode=min}");
  assert_int_equal(tr_early_stopping_get(own, h)->patience, 0);
  hk_destroy(own);
}

/* =================================================================================================
   A hand-written loop (no train.h loop) honouring hk_request_checkpoint and HK_STOP
   ================================================================================================= */
static void test_own_loop(void **state) {
  static const double v[] = { 5, 3, 4, 4 };
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  char dir[300], spec[600], files[1024];
  int epoch, saves = 0;
  FILE *f;
  (void)state;
  snprintf(dir, sizeof dir, "%s/own", g_root);
  memset(&ctx, 0, sizeof ctx);
  ctx.stage = HK_STAGE_FIT;
  assert_int_equal(tr_add_factories(reg), HK_OK);
  snprintf(spec, sizeof spec, "early_stopping(monitor=loss, patience=1); model_checkpoint(dirpath=\"%s\", monitor=loss, "
           "filename=\"{epoch}\", save_last=link)", dir);
  assert_int_equal(hk_spec_apply(reg, spec), HK_OK);
  for (epoch = 0; epoch < 4 && !HK_FLOW_HAS(&flow, HK_FLOW_STOP); epoch++) {
    int i;
    ctx.epoch = epoch;
    ctx.global_step = epoch + 1;
    hk_metric_set(&ctx, "loss", v[epoch]);
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_EPOCH_END, &ctx, &flow);
    if (ctx.requests & HK_REQUEST_CHECKPOINT) { /* what a loop must do: save at each path, then on_checkpoint_saved */
      assert_int_equal(ctx.checkpoint_default, 0);
      for (i = 0; i < ctx.n_checkpoint_paths; i++) {
        char tmp[400];
        snprintf(tmp, sizeof tmp, "%s.tmp", ctx.checkpoint_paths[i]);
        assert_non_null(f = fopen(tmp, "wb")); /* a new file renamed over the path (never written through a link) */
        fputs("state", f);
        fclose(f);
        assert_int_equal(rename(tmp, ctx.checkpoint_paths[i]), 0);
        ctx.path = ctx.checkpoint_paths[i];
        HK_FIRE(reg, HK_ON_CHECKPOINT_SAVED, &ctx);
        ctx.path = NULL;
        saves++;
      }
      ctx.requests &= ~(unsigned)HK_REQUEST_CHECKPOINT;
      ctx.n_checkpoint_paths = 0;
    }
  }
  assert_int_equal(epoch, 3); /* 4 at epoch 2 does not improve on 3: patience 1 stops */
  assert_int_equal(saves, 3); /* epoch 2 saved no top-k file: last.ckpt is a file of its own */
  list_dir(dir, files, sizeof files);
  assert_string_equal(files, "epoch=1.ckpt last.ckpt");
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  rm_rf(dir);
}

/* Two processes (not MPI) started together with one dirpath and one filename template: each picks the
   names of its files (epoch=E.ckpt, last.ckpt, a version when taken) before either writes (a barrier
   holds both between the save point and the save), so a name known only in one process is taken
   twice. Whatever names they get, each one's best_model_path and last_model_path must hold its own
   state at the end: neither replaced nor deleted (save_top_k=1 evicts the previous file) a file the
   other wrote, and no empty file is left. */
static int mc_proc_save(void *user, FILE *f) { return fprintf(f, "process %d\n", *(const int *)user) > 0 ? 0 : -1; }
static int mc_proc_load(void *user, FILE *f) { (void)user; (void)f; return 0; }
static int mc_proc(const char *dir, int id, int ready_fd, int go_fd) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  tr_run_desc d;
  tr_model_checkpoint_desc mc;
  const tr_model_checkpoint_state *st;
  hk_handle h;
  char report[400], x = 'x';
  FILE *f;
  int e;
  memset(&d, 0, sizeof d);
  d.no_signals = 1;
  d.save_model = mc_proc_save;
  d.load_model = mc_proc_load;
  d.model_user = &id;
  d.log_every_n_steps = -1;
  if (tr_run_setup(reg, &d) != TR_OK) return 10;
  mc = (tr_model_checkpoint_desc){ .dirpath = dir, .filename = "{epoch}", .save_top_k = 1, .save_last = TR_SAVE_LAST_YES,
                                   .save_on_train_epoch_end = TR_YES };
  if (tr_model_checkpoint(reg, &mc, &h) != TR_OK) return 11;
  memset(&ctx, 0, sizeof ctx);
  if (tr_run_start(reg, &ctx, NULL) != TR_OK) return 12;
  for (e = 0; e < 2; e++) {
    ctx.epoch = e;
    ctx.global_step = e + 1;
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_EPOCH_END, &ctx, &flow); /* the names are picked here */
    if (write(ready_fd, &x, 1) != 1 || read(go_fd, &x, 1) != 1) return 13;
    (void)tr_run_epoch_end(reg, &ctx, &flow);               /* and written here */
  }
  if (tr_run_finish(reg, &ctx, TR_OK) != TR_OK) { fprintf(stderr, "process %d: %s\n", id, tr_run_error(reg)); return 14; }
  st = tr_model_checkpoint_get(reg, h);
  snprintf(report, sizeof report, "%s.report%d", dir, id);
  if (!(f = fopen(report, "w"))) return 15;
  fprintf(f, "%s\n%s\n", st->best_model_path, st->last_model_path);
  fclose(f);
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  return 0;
}
static void test_mc_two_processes_one_dir(void **state) {
  char dir[300], report[400], line[2][600], want[32], got[32];
  int ready[2][2], go[2][2], i, round, status, n_files = 0;
  pid_t pid[2];
  DIR *dd;
  struct dirent *e;
  (void)state;
  snprintf(dir, sizeof dir, "%s/two_procs", g_root);
  fflush(NULL);
  for (i = 0; i < 2; i++) {
    assert_int_equal(pipe(ready[i]), 0);
    assert_int_equal(pipe(go[i]), 0);
    pid[i] = fork();
    assert_true(pid[i] >= 0);
    if (pid[i] == 0) _exit(mc_proc(dir, i, ready[i][1], go[i][0]));
  }
  for (round = 0; round < 2; round++) { /* both at the save point, then both save */
    char x;
    for (i = 0; i < 2; i++) assert_int_equal(read(ready[i][0], &x, 1), 1);
    for (i = 0; i < 2; i++) assert_int_equal(write(go[i][1], &x, 1), 1);
  }
  for (i = 0; i < 2; i++) {
    assert_true(waitpid(pid[i], &status, 0) == pid[i]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    close(ready[i][0]); close(ready[i][1]); close(go[i][0]); close(go[i][1]);
  }
  for (i = 0; i < 2; i++) {
    FILE *f;
    int k;
    snprintf(report, sizeof report, "%s.report%d", dir, i);
    assert_non_null(f = fopen(report, "r"));
    for (k = 0; k < 2; k++) {
      FILE *ck;
      assert_non_null(fgets(line[k], sizeof line[k], f));
      line[k][strcspn(line[k], "\n")] = 0;
      snprintf(want, sizeof want, "process %d\n", i);
      memset(got, 0, sizeof got);
      ck = fopen(line[k], "rb");
      if (!ck) fail_msg("process %d: its %s '%s' is gone", i, k ? "last_model_path" : "best_model_path", line[k]);
      if (fread(got, 1, strlen(want), ck) != strlen(want) || strcmp(got, want))
        fail_msg("process %d: its '%s' holds the other process's state ('%.10s')", i, line[k], got);
      fclose(ck);
    }
    fclose(f);
    remove(report);
  }
  assert_string_not_equal(line[0], line[1]);
  assert_non_null(dd = opendir(dir));
  while ((e = readdir(dd)) != NULL) { /* two files each, none empty (a claim left behind) */
    struct stat st;
    char path[600];
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    assert_int_equal(stat(path, &st), 0);
    if (st.st_size == 0) fail_msg("an empty file is left: %s", path);
    n_files++;
  }
  closedir(dd);
  assert_int_equal(n_files, 4);
  rm_rf(dir);
  rmdir(dir);
}

/* A name is claimed on disk (an empty file) when it is picked; a save that then fails leaves no empty
   file behind: the claim goes at teardown. */
static int mc_save_fails(void *user, FILE *f) { (void)user; (void)f; return -1; }
static void test_mc_failed_save_no_claim_left(void **state) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  tr_run_desc d;
  tr_model_checkpoint_desc mc;
  char dir[300], files[1024];
  (void)state;
  snprintf(dir, sizeof dir, "%s/failed_save", g_root);
  memset(&d, 0, sizeof d);
  d.no_signals = 1;
  d.save_model = mc_save_fails;
  d.load_model = mc_proc_load;
  d.log = fopen("/dev/null", "w");
  d.log_every_n_steps = -1;
  assert_int_equal(tr_run_setup(reg, &d), TR_OK);
  memset(&mc, 0, sizeof mc);
  mc.dirpath = dir;
  mc.filename = "{epoch}";
  mc.save_last = TR_SAVE_LAST_LINK;
  mc.save_on_train_epoch_end = TR_YES;
  assert_int_equal(tr_model_checkpoint(reg, &mc, NULL), TR_OK);
  memset(&ctx, 0, sizeof ctx);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  ctx.global_step = 1;
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_EPOCH_END, &ctx, &flow);
  list_dir(dir, files, sizeof files);
  assert_string_equal(files, "epoch=0.ckpt last.ckpt"); /* claimed: empty files */
  assert_true(tr_run_epoch_end(reg, &ctx, &flow) & TR_RUN_STOP); /* the save fails */
  assert_int_not_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  list_dir(dir, files, sizeof files);
  assert_string_equal(files, "");
  fclose(d.log);
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  rm_rf(dir);
  rmdir(dir);
}

/* hk_request_checkpoint itself */
static void test_request_checkpoint_api(void **state) {
  hk_ctx ctx;
  char names[HK_MAX_CHECKPOINT_PATHS + 1][16];
  int i;
  (void)state;
  memset(&ctx, 0, sizeof ctx);
  assert_int_equal(hk_request_checkpoint(&ctx, NULL), HK_ERR_INVALID);
  assert_int_equal(hk_request_checkpoint(&ctx, ""), HK_ERR_INVALID);
  assert_int_equal(hk_request_checkpoint(NULL, "a"), HK_ERR_INVALID);
  assert_int_equal(ctx.requests, 0);
  for (i = 0; i <= HK_MAX_CHECKPOINT_PATHS; i++) snprintf(names[i], sizeof names[i], "p%d", i);
  for (i = 0; i < HK_MAX_CHECKPOINT_PATHS; i++) assert_int_equal(hk_request_checkpoint(&ctx, names[i]), HK_OK);
  assert_int_equal(hk_request_checkpoint(&ctx, "p0"), HK_OK); /* already queued */
  assert_int_equal(hk_request_checkpoint(&ctx, names[HK_MAX_CHECKPOINT_PATHS]), HK_ERR_FULL);
  assert_int_equal(ctx.n_checkpoint_paths, HK_MAX_CHECKPOINT_PATHS);
  assert_int_equal(ctx.requests, HK_REQUEST_CHECKPOINT);
  assert_int_equal(ctx.checkpoint_default, 0);
  hk_request(&ctx, HK_REQUEST_CHECKPOINT);
  assert_int_equal(ctx.checkpoint_default, 1);
}

/* =================================================================================================
   Exact resume with all three registered (and ema, nan_guard, lr_finder, lr_monitor, gradient_monitor,
   model_summary: every standard callback but accumulation_scheduler, which tests/test_callbacks_b.c
   covers with the others): 2N epochs = N + save + load in a new trainer + N, bit for
   bit (parameters), and the callbacks' decisions and state (early stopping stops at the same epoch,
   the same checkpoint files, the same best, the timer keeps counting).
   ================================================================================================= */
typedef struct run_out {
  float p[2];
  int64_t epoch, step, stopped_epoch, wait;
  double best, es_best, timer, lr;
  float ema[2];
  char best_path[600], files[1024];
} run_out;

static int64_t g_every_steps; /* 0: model_checkpoint at epoch ends (+ last link); n: every n steps, "{step}" names */
static void add_all(sc *m, tr_trainer *t, const char *dir, hk_handle *hes, hk_handle *hmc, hk_handle *htm) {
  assert_int_equal(tr_early_stopping(t->reg, &(tr_early_stopping_desc){ .monitor = "val/loss", .patience = 3 }, hes), TR_OK);
  if (g_every_steps)
    assert_int_equal(tr_model_checkpoint(t->reg, &(tr_model_checkpoint_desc){ .dirpath = dir, .monitor = "val/loss", .save_top_k = 2,
                     .every_n_train_steps = g_every_steps, .filename = "{step}" }, hmc), TR_OK);
  else
    assert_int_equal(tr_model_checkpoint(t->reg, &(tr_model_checkpoint_desc){ .dirpath = dir, .monitor = "val/loss", .save_top_k = 2,
                     .save_last = TR_SAVE_LAST_LINK }, hmc), TR_OK);
  assert_int_equal(tr_timer(t->reg, &(tr_timer_desc){ .seconds = 1000, .clock = sc_now, .clock_user = m }, htm), TR_OK);
  /* the other standard callbacks too; the stateful ones (ema, nan_guard, lr_finder) must resume exactly */
  assert_int_equal(hk_spec_apply(t->reg, "ema(decay=0.9); nan_guard; lr_finder(num_training_steps=20, max_lr=2, verbose=false); "
                                         "lr_monitor; gradient_monitor(log_frequency=2); model_summary(max_rows=0)"), HK_OK);
}
static void fill_out(run_out *o, sc *m, tr_trainer *t, hk_handle hes, hk_handle hmc, hk_handle htm) {
  const tr_early_stopping_state *es = tr_early_stopping_get(t->reg, hes);
  const tr_model_checkpoint_state *mc = tr_model_checkpoint_get(t->reg, hmc);
  memcpy(o->p, m->p, sizeof o->p);
  o->epoch = t->epoch;
  o->step = t->global_step;
  o->stopped_epoch = es->stopped_epoch;
  o->wait = es->wait_count;
  o->es_best = es->best_score;
  o->best = mc->best_model_score;
  snprintf(o->best_path, sizeof o->best_path, "%s", strrchr(mc->best_model_path, '/') + 1);
  o->timer = tr_timer_get(t->reg, htm)->time_elapsed[TR_TIMER_TRAIN];
  o->lr = t->optim.lr;
  memcpy(o->ema, tr_ema_get(t->reg, hk_find(t->reg, "ema"))->average, sizeof o->ema);
  list_dir(m->dir, o->files, sizeof o->files);
}

/* split: the first half's tr_config.max_steps (0: 3 epochs); resume from model_checkpoint's file */
static void exact_resume(int64_t split_steps, const char *ckpt_name, const char *whole_files, const char *split_files) {
  static const double v[] = { 5, 4, 4.5, 3.5, 3.9, 3.6, 3.7, 3.8, 3.0 };
  sc m;
  tr_trainer t;
  hk_handle a, b, c3;
  tr_config c = sc_cfg(9);
  run_out whole, split;
  char ckpt[600];
  /* in one go */
  sc_init(&m, &t, v, 9, 0);
  add_all(&m, &t, m.dir, &a, &b, &c3);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  fill_out(&whole, &m, &t, a, b, c3);
  sc_free(&m, &t);
  assert_int_equal(whole.stopped_epoch, 6); /* best 3.5 at epoch 3; 3.9, 3.6, 3.7 */
  /* in two halves: 3 epochs, then a new trainer resumes from the checkpoint model_checkpoint wrote (last) */
  sc_init(&m, &t, v, 9, 0);
  add_all(&m, &t, m.dir, &a, &b, &c3);
  if (split_steps) c.max_steps = split_steps;
  else c.max_epochs = 3;
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  if (ckpt_name) in_dir(&m, ckpt, sizeof ckpt, ckpt_name);
  else snprintf(ckpt, sizeof ckpt, "%s", tr_model_checkpoint_get(t.reg, b)->last_model_path);
  {
    char dir[300];
    double clock = m.clock;
    snprintf(dir, sizeof dir, "%s", m.dir);
    sc_free(&m, &t);
    sc_init(&m, &t, v, 9, 0);
    rmdir(m.dir);
    snprintf(m.dir, sizeof m.dir, "%s", dir);
    m.clock = clock + 100; /* another process's clock: the timer adds to what the checkpoint holds */
    m.p[0] = 99;           /* the checkpoint restores it */
  }
  add_all(&m, &t, m.dir, &a, &b, &c3);
  c.max_epochs = 9;
  c.max_steps = 0;
  c.resume_from = ckpt;
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  fill_out(&split, &m, &t, a, b, c3);
  sc_free(&m, &t);
  assert_memory_equal(whole.p, split.p, sizeof whole.p);
  assert_int_equal(whole.epoch, split.epoch);
  assert_int_equal(whole.step, split.step);
  assert_int_equal(whole.stopped_epoch, split.stopped_epoch);
  assert_int_equal(whole.wait, split.wait);
  assert_true(whole.es_best == split.es_best);
  assert_true(whole.best == split.best);
  assert_string_equal(whole.best_path, split.best_path);
  assert_true(whole.timer == split.timer);
  assert_true(whole.lr == split.lr && whole.lr != 0.1); /* the finder's choice, applied again after the resume */
  assert_memory_equal(whole.ema, split.ema, sizeof whole.ema);
  /* the same files: the checkpoint a run resumed from is managed as any top-k file (kept while in the top k) */
  assert_string_equal(whole.files, whole_files);
  assert_string_equal(split.files, split_files);
}
/* Resuming a run that stopped early, or finished (issue 28 item 9): nothing fires, nothing is made on
   disk (no log directory), and the message says that the run stopped early and what to raise to go
   on; a larger patience given now, or a larger max_epochs, trains on from the checkpoint. */
static int g_setups;
static hk_signal count_setup(hk_ctx *ctx, void *user) { (void)ctx; (void)user; g_setups++; return HK_CONTINUE; }
static void resume_es_run(sc *m, tr_trainer *t, const char *dir, int patience) {
  static const double v[] = { 5, 4, 4.5, 4.4, 4.6, 3, 2, 1.5, 1.2, 1.1 };
  char spec[900];
  sc_init(m, t, v, 10, 0);
  if (dir) { rmdir(m->dir); snprintf(m->dir, sizeof m->dir, "%s", dir); }
  snprintf(spec, sizeof spec, "early_stopping(monitor=val/loss, patience=%d); model_checkpoint(dirpath=\"%s/ckpt\", "
           "save_last=true); csv(save_dir=\"%s/logs\")", patience, m->dir, m->dir);
  assert_int_equal(hk_spec_apply(t->reg, spec), HK_OK);
  hk_on(t->reg, HK_SETUP, count_setup, NULL, &(hk_opts){ .name = "count_setup" }, NULL);
}
static void test_resume_after_early_stop(void **state) {
  sc m;
  tr_trainer t;
  tr_config c = sc_cfg(20);
  char dir[300], ckpt[600], logs[600], before[2048], after[2048];
  const tr_early_stopping_state *es;
  (void)state;
  /* the run: stops early at epoch 3 (best 4 at epoch 1) */
  resume_es_run(&m, &t, NULL, 2);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(t.epoch, 4);
  snprintf(dir, sizeof dir, "%s", m.dir);
  snprintf(ckpt, sizeof ckpt, "%s/ckpt/last.ckpt", dir);
  snprintf(logs, sizeof logs, "%s/logs/lightning_logs", dir);
  sc_free(&m, &t);
  list_dir(logs, before, sizeof before);
  assert_string_equal(before, "version_0");

  /* again, the same settings: refused before anything, saying why and what to raise */
  g_setups = 0;
  resume_es_run(&m, &t, dir, 2);
  c.resume_from = ckpt;
  assert_int_equal(tr_fit(&t, &c), TR_ERR_INVALID);
  assert_non_null(strstr(tr_error(&t), "tr_fit: the run that wrote '"));
  assert_non_null(strstr(tr_error(&t), "last.ckpt' stopped early, at epoch 4 (step 16): early_stopping{monitor=val/loss,mode=min} "
                                       "(Monitored metric val/loss did not improve in the last 2 records. Best score: 4.000."));
  assert_non_null(strstr(tr_error(&t), "Resuming it trains nothing; to train on from it, give early_stopping a patience above 2"));
  assert_int_equal(g_setups, 0);
  assert_null(strstr(sc_logtext(&m), "never checked"));
  list_dir(logs, after, sizeof after);
  assert_string_equal(after, before); /* no new (empty) log directory */
  sc_free(&m, &t);

  /* a larger patience now: it trains on from epoch 4, and stops again when that patience runs out */
  resume_es_run(&m, &t, dir, 4);
  c.resume_from = ckpt;
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  es = tr_early_stopping_get(t.reg, hk_find(t.reg, "early_stopping{monitor=val/loss,mode=min}"));
  assert_int_equal(es->patience, 4);
  assert_true(t.epoch > 4);
  assert_true(es->best_score < 4.0); /* 3, 2, ... came after the old stop */
  assert_non_null(strstr(sc_logtext(&m), "resuming past the early stop"));
  sc_free(&m, &t);

  /* a run that finished at max_epochs: raise max_epochs */
  resume_es_run(&m, &t, NULL, 20);
  c = sc_cfg(3);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  snprintf(dir, sizeof dir, "%s", m.dir);
  snprintf(ckpt, sizeof ckpt, "%s/ckpt/last.ckpt", dir);
  sc_free(&m, &t);
  g_setups = 0;
  resume_es_run(&m, &t, dir, 20);
  c.resume_from = ckpt;
  assert_int_equal(tr_fit(&t, &c), TR_ERR_INVALID);
  assert_non_null(strstr(tr_error(&t), "last.ckpt' finished: it trained 3 epochs (12 steps), and this fit's limit is max_epochs 3: "
                                       "resuming it trains nothing; raise max_epochs to train on from it"));
  assert_int_equal(g_setups, 0);
  sc_free(&m, &t);
  resume_es_run(&m, &t, dir, 20);
  c.max_epochs = 5;
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(t.epoch, 5);
  sc_free(&m, &t);
}

static void test_exact_resume(void **state) {
  (void)state;
  g_every_steps = 0;
  /* the last epoch (6) kept no top-k file: last.ckpt is a file of its own, not a link to epoch 5 */
  exact_resume(0, NULL, "epoch=3-step=16.ckpt epoch=5-step=24.ckpt last.ckpt",
               "epoch=3-step=16.ckpt epoch=5-step=24.ckpt last.ckpt"); /* from last.ckpt (a link to epoch 2's file) */
}
static void test_exact_resume_mid_epoch(void **state) {
  (void)state;
  g_every_steps = 6;         /* step 6 is the middle of epoch 1 (4 batches per epoch) */
  /* the file it resumed from (step=6) fell out of the top 2: deleted as any other (issue 28 item 16) */
  exact_resume(6, "step=6.ckpt", "step=18.ckpt step=24.ckpt", "step=18.ckpt step=24.ckpt");
  g_every_steps = 0;
}

/* ------------------------------------------------------------------------------------------------ */
int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_es_patience),
    cmocka_unit_test(test_es_ties_and_zero_patience),
    cmocka_unit_test(test_es_min_delta_and_max),
    cmocka_unit_test(test_es_thresholds),
    cmocka_unit_test(test_es_nan),
    cmocka_unit_test(test_es_min_epochs_not_latched),
    cmocka_unit_test(test_es_strict),
    cmocka_unit_test(test_es_validation_end),
    cmocka_unit_test(test_mc_top_k),
    cmocka_unit_test(test_mc_resumed_file_managed),
    cmocka_unit_test(test_mc_retention),
    cmocka_unit_test(test_resume_auto_fit),
    cmocka_unit_test(test_mc_default_dir),
    cmocka_unit_test(test_mc_ties_and_nan),
    cmocka_unit_test(test_mc_no_monitor_and_last),
    cmocka_unit_test(test_mc_validation_twice_per_epoch),
    cmocka_unit_test(test_mc_rerun_same_dir),
    cmocka_unit_test(test_mc_every_n_train_steps_and_time),
    cmocka_unit_test(test_mc_max_every_2_epochs),
    cmocka_unit_test(test_mc_state_load),
    cmocka_unit_test(test_state_ranges),
    cmocka_unit_test(test_mc_templates),
    cmocka_unit_test(test_mc_missing_monitor),
    cmocka_unit_test(test_timer),
    cmocka_unit_test(test_bad_parameters),
    cmocka_unit_test(test_mc_state_never_deletes_others),
    cmocka_unit_test(test_mc_filename_last_refused),
    cmocka_unit_test(test_mc_two_in_one_dir),
    cmocka_unit_test(test_mc_last_link_is_latest),
    cmocka_unit_test(test_mc_step_save_fresh_value),
    cmocka_unit_test(test_mc_missing_before_first_validation),
    cmocka_unit_test(test_mc_kth_and_no_monitor_state),
    cmocka_unit_test(test_mc_fixed_name_once),
    cmocka_unit_test(test_mc_ranges_and_empty_filename),
    cmocka_unit_test(test_fit_ok_clears_refusal),
    cmocka_unit_test(test_mc_setup_checks),
    cmocka_unit_test(test_spec_strings),
    cmocka_unit_test(test_own_loop),
    cmocka_unit_test(test_mc_two_processes_one_dir),
    cmocka_unit_test(test_mc_failed_save_no_claim_left),
    cmocka_unit_test(test_request_checkpoint_api),
    cmocka_unit_test(test_resume_after_early_stop),
    cmocka_unit_test(test_exact_resume),
    cmocka_unit_test(test_exact_resume_mid_epoch),
  };
  return run_tests_in_dir(tests, "test_callbacks", g_root);
}
