/* tests/test_continue.c - a resume continues its run (issue 27): the run directory recorded in every
   checkpoint, the loggers back in it, the records after the checkpoint superseded.

   cmocka tests, real files under a temporary directory (or --tb DIR: kept there, for tests/tb_continue.py):
     - a loop of your own (tr_run_start with a resume path), resumed from checkpoints written after a
       batch whose validation followed, after a validation, and after a batch without one: the same
       version directory, metrics.csv and metrics.jsonl equal to an uninterrupted run's (each step once),
       model_checkpoint's top-k and early_stopping's counters as the uninterrupted run ends with, no
       "top-k starts afresh"
     - train.h's trainer (tr_fit with resume_from), resumed from checkpoints written mid-epoch, at an
       epoch's end and after a validation: the same
     - the checkpoint's directory replaced by a symlink, or gone: one warning, a new version_N, nothing
       written through the link
     - two resumes of one run at once (in one process here; two processes meet the same lock): the
       second gets a new version_N with one warning, the first's files are whole
     - new_version_on_resume = TR_YES: Lightning's way (a new version, top-k afresh, old logs untouched)
     - a metrics.csv there that the logger did not write is left as it is, and said
     - a run is known by its run id (issue 37, item 2): its directory's inode holding another run's records is
       not continued (a new version_N, said); the directory spelled otherwise, moved or copied is continued;
       an old checkpoint's block (device and inode) still is
     - a version directory renamed to another leaf is found by its run id and continued (own step loop, trainer,
       own epoch loop); two there with the id (a copy): neither, said; another run's renamed there: untouched */
#define TEST_NO_FSYNC /* what it checks needs no flush to the disk (tests/test.h) */
#include "test.h"

#include <dirent.h>

static char g_root[256];

/* The two files hold the same text (from_line: after their first from_line lines: a jsonl's hparams
   line names its run's directory in the specs). */
static void assert_same_file(const char *a, const char *b, int from_line) {
  char *x = slurp(a), *y = slurp(b), *p = x, *q = y;
  int i;
  assert_non_null(x);
  assert_non_null(y);
  for (i = 0; i < from_line && p && q; i++) { p = strchr(p, '\n'); q = strchr(q, '\n'); p += !!p; q += !!q; }
  assert_non_null(p);
  assert_non_null(q);
  if (strcmp(p, q)) fprintf(stderr, "%s:\n%s\n%s:\n%s\n", a, x, b, y);
  assert_string_equal(p, q);
  free(x);
  free(y);
}
static int exists(const char *path) { struct stat st; return lstat(path, &st) == 0; }
static int entries(const char *dir) { /* names in dir, . and .. left out */
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  if (!d) return -1;
  while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  return n;
}
static void at(char *out, size_t cap, const char *a, const char *b) { snprintf(out, cap, "%s/%s/%s", g_root, a, b); }

/* The callbacks' end state a resumed run must reach as the uninterrupted one did. */
typedef struct ends { double best, kth; int n_best; int64_t wait; double es_best; } ends;
typedef struct watched { hk_handle mc, es; } watched;
static watched watch(hk_registry *reg) { /* model_checkpoint(monitor=val/loss, save_top_k=2), early_stopping */
  watched w;
  tr_model_checkpoint_desc m;
  tr_early_stopping_desc e;
  memset(&m, 0, sizeof m);
  m.monitor = "val/loss";
  m.save_top_k = 2;
  memset(&e, 0, sizeof e);
  e.monitor = "val/loss";
  e.patience = 50;
  assert_int_equal(tr_model_checkpoint(reg, &m, &w.mc), TR_OK);
  assert_int_equal(tr_early_stopping(reg, &e, &w.es), TR_OK);
  return w;
}
static ends ends_of(hk_registry *reg, watched w) {
  ends e;
  const tr_model_checkpoint_state *mc = tr_model_checkpoint_get(reg, w.mc);
  const tr_early_stopping_state *es = tr_early_stopping_get(reg, w.es);
  assert_non_null(mc);
  assert_non_null(es);
  e.best = mc->best_model_score;
  e.kth = mc->kth_value;
  e.n_best = mc->n_best_k;
  e.wait = es->wait_count;
  e.es_best = es->best_score;
  return e;
}
static void assert_ends(ends a, ends b) {
  assert_true(a.best == b.best);
  assert_true(a.kth == b.kth);
  assert_int_equal(a.n_best, b.n_best);
  assert_int_equal(a.wait, b.wait);
  assert_true(a.es_best == b.es_best);
}

/* A hook that interrupts a run (issue 37, items 3 and 18): raises g_kill_sig once, when a checkpoint of
   step g_kill_step has been saved (g_kill_at_batch: when that step's batch starts). */
static int g_kill_sig, g_kill_at_batch;
static int64_t g_kill_step = -1;
static hk_signal killer(hk_ctx *ctx, void *u) {
  (void)u;
  if (ctx->global_step == g_kill_step) { g_kill_step = -1; raise(g_kill_sig); }
  return HK_CONTINUE;
}
static void add_killer(hk_registry *reg) {
  hk_callback cb;
  if (!g_kill_sig) return;
  memset(&cb, 0, sizeof cb);
  cb.name = "killer";
  if (g_kill_at_batch) cb.on_train_batch_start = killer;
  else cb.on_checkpoint_saved = killer;
  assert_int_equal(hk_add_callback(reg, &cb, NULL, NULL), HK_OK);
}

/* ---- a loop of your own: loss = 1 + p0^2, SGD; a validation every 2 steps, val/loss a function of
   the step; a checkpoint after every batch (b<step>.ckpt) and every validation (v<step>.ckpt) ---- */
#define OWN_STEPS 10
#define OWN_SPECS "csv(); jsonl(); tensorboard()"
static const char *g_specs = OWN_SPECS; /* test_plot_continues adds the plot */
typedef struct lp {
  TWO_FLOAT_LOOP;
  memlog log;
  char dir[300];
  watched w;
} lp;
static int g_bad_load; /* test_failed_resume_changes_nothing: 1 load_model fails, 2 it reads half the model's bytes */
static int lp_save(void *user, FILE *f) { lp *l = (lp *)user; return fwrite(l->p, sizeof l->p, 1, f) != 1; }
static int lp_load(void *user, FILE *f) {
  lp *l = (lp *)user;
  if (g_bad_load == 1) return 1;
  if (g_bad_load == 2) return fread(l->p, sizeof l->p[0], 1, f) != 1;
  return fread(l->p, sizeof l->p, 1, f) != 1;
}
static void lp_init(lp *l, const char *name, int new_version) {
  tr_run_desc d;
  memset(l, 0, sizeof *l);
  two_float_bind(l);
  snprintf(l->dir, sizeof l->dir, "%s/%s", g_root, name);
  assert_non_null(memlog_open(&l->log));
  assert_non_null(l->reg = hk_create(NULL));
  memset(&d, 0, sizeof d);
  d.epochs = TR_NO;
  d.max_steps = OWN_STEPS;
  d.log_every_n_steps = 1;
  d.save_dir = l->dir;
  d.log = l->log.f;
  d.no_signals = 1;
  d.no_resume_message = 1;
  d.new_version_on_resume = new_version;
  d.save_model = lp_save;
  d.load_model = lp_load;
  d.model_user = l;
  assert_int_equal(tr_run_setup(l->reg, &d), TR_OK);
  assert_int_equal(hk_spec_apply(l->reg, g_specs), HK_OK);
  l->w = watch(l->reg);
  add_killer(l->reg);
}
static const char *lp_log(lp *l) { return memlog_text(&l->log); }
static void lp_free(lp *l) {
  hk_ctx_free(&l->ctx);
  hk_destroy(l->reg);
  memlog_close(&l->log);
}
static void lp_save_as(lp *l, char kind) {
  char path[400];
  snprintf(path, sizeof path, "%s/%c%lld.ckpt", l->dir, kind, (long long)l->ctx.global_step);
  if (tr_run_save(l->reg, &l->ctx, path) != TR_OK) fail_msg("%s", tr_run_error(l->reg));
}
/* llm.c's shape: a validation at the top of every 2nd step (none at the first), then the batch. */
static void lp_step(lp *l) {
  hk_registry *reg = l->reg;
  hk_ctx *c = &l->ctx;
  if (c->global_step > 0 && c->global_step % 2 == 0 && !tr_run_resumed_at(reg, TR_RUN_AT_VALIDATION)) {
    HK_FIRE_FLOW(reg, HK_ON_VALIDATION_START, c, &l->flow);
    HK_FIRE_FLOW(reg, HK_ON_VALIDATION_EPOCH_START, c, &l->flow);
    hk_metric_set(c, "val/loss", 1.0 + (double)((c->global_step * 7) % 5) / 10.0);
    HK_FIRE_FLOW(reg, HK_ON_VALIDATION_EPOCH_END, c, &l->flow);
    tr_run_log(reg, c, "val");
    HK_FIRE_FLOW(reg, HK_ON_VALIDATION_END, c, &l->flow);
    (void)tr_run_batch_end(reg, c, &l->flow);
    lp_save_as(l, 'v');
    hk_flow_clear(&l->flow, HK_FLOW_BATCH_SIGNALS);
  }
  c->batch_idx = c->global_step;
  c->lr = 0.1;
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, c, &l->flow);
  c->loss = 1.0 + (double)l->p[0] * l->p[0];
  l->g[0] = 2 * l->p[0];
  l->g[1] = 0.5f;
  hk_grads_changed(c);
  HK_FIRE_FLOW(reg, HK_ON_BEFORE_OPTIMIZER_STEP, c, &l->flow);
  l->p[0] -= 0.1f * l->g[0];
  l->p[1] -= 0.1f * l->g[1];
  c->global_step++;
  c->samples_seen++;
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, c, &l->flow);
  (void)tr_run_batch_end(reg, c, &l->flow);
  lp_save_as(l, 'b');
  hk_flow_clear(&l->flow, HK_FLOW_BATCH_SIGNALS);
}
/* A run from resume (NULL: from the start) to OWN_STEPS; the callbacks' end state into *e. */
static void lp_run(const char *name, const char *resume, int new_version, ends *e, char *log, size_t log_cap) {
  lp l;
  char path[400];
  lp_init(&l, name, new_version);
  if (resume) snprintf(path, sizeof path, "%s/%s", l.dir, resume);
  assert_int_equal(tr_run_start(l.reg, &l.ctx, resume ? path : NULL), TR_OK);
  while (l.ctx.global_step < OWN_STEPS) lp_step(&l);
  assert_int_equal(tr_run_finish(l.reg, &l.ctx, TR_OK), TR_OK);
  if (e) *e = ends_of(l.reg, l.w);
  if (log) snprintf(log, log_cap, "%s", lp_log(&l));
  lp_free(&l);
}

static void assert_logs_equal(const char *name, const char *ref) {
  char a[400], b[400];
  at(a, sizeof a, name, "lightning_logs/version_0/metrics.csv");
  at(b, sizeof b, ref, "lightning_logs/version_0/metrics.csv");
  assert_same_file(a, b, 0);
  at(a, sizeof a, name, "lightning_logs/version_0/metrics.jsonl");
  at(b, sizeof b, ref, "lightning_logs/version_0/metrics.jsonl");
  assert_same_file(a, b, 1);
  at(a, sizeof a, name, "lightning_logs/version_1");
  assert_false(exists(a)); /* no new version */
}

/* b4: after step 4's batch, its validation followed (its val record is superseded, written again);
   v6: after step 6's validation (kept); b5: after a batch without validation. Each resume runs to the
   end, as the uninterrupted run did: the same files, the callbacks where the uninterrupted run left them. */
/* A run of a loop: name, the checkpoint it resumes (NULL: none), arg (lp_run's new_version, fm_fit's interval). */
typedef void (*run_fn)(const char *name, const char *resume, int64_t arg, ends *e, char *log, size_t log_cap);
/* NAME_ref and NAME run uninterrupted, the same; then each resume of NAME from the n checkpoints in from runs to
   the end as NAME_ref did: the same files, the callbacks where it left them, no fresh start (and, quiet, no
   warning). */
static void resumes_as_uninterrupted(run_fn run, const char *name, int64_t arg, const char *const *from, size_t n, int quiet) {
  ends ref, got;
  char ref_name[64], log[8192];
  size_t i;
  snprintf(ref_name, sizeof ref_name, "%s_ref", name);
  run(ref_name, NULL, arg, &ref, NULL, 0);
  run(name, NULL, arg, &got, NULL, 0);
  assert_logs_equal(name, ref_name);
  for (i = 0; i < n; i++) {
    run(name, from[i], arg, &got, log, sizeof log);
    assert_logs_equal(name, ref_name);
    assert_ends(got, ref);
    assert_null(strstr(log, "afresh"));
    if (quiet) assert_null(strstr(log, "warning"));
  }
}
static void own_run_as(const char *name, const char *resume, int64_t new_version, ends *e, char *log, size_t log_cap) {
  lp_run(name, resume, (int)new_version, e, log, log_cap);
}
static void test_own_loop_continues(void **state) {
  static const char *const from[] = { "b4.ckpt", "v6.ckpt", "b5.ckpt", "b1.ckpt" };
  (void)state;
  resumes_as_uninterrupted(own_run_as, "own", 0, from, sizeof from / sizeof from[0], 1);
}

/* ---- train.h's trainer: a line y = 2x fitted by one weight, 4 batches an epoch, 3 epochs ---- */
typedef struct fm { float w, g; float xs[4]; float w2[2], g2[2]; } fm;
static int g_fm_params = 1; /* 2: a model that does not match the checkpoints of 1 */
static const char *g_fm_save_to; /* tr_config.save_to (test_trainer_save_to_dir_missing) */
static const char *g_fm_ckpt;    /* instead of the two model_checkpoints (NULL: those) */
static const char *g_fm_more;    /* more specs (NULL: none) */
static const char *g_fm_flush = ""; /* each logger's flush_every ("": the default) */
static int fm_forward(void *user, void *batch, int training, double *loss) {
  fm *m = (fm *)user;
  float x = *(float *)batch, e = m->w * x - 2 * x;
  (void)training;
  *loss = (double)e * e;
  return 0;
}
static int fm_backward(void *user, void *batch) {
  fm *m = (fm *)user;
  float x = *(float *)batch;
  m->g = 2 * (m->w * x - 2 * x) * x;
  return 0;
}
static int64_t fm_count(void *user) { (void)user; return 4; }
static int fm_get(void *user, int64_t i, void **batch) { *batch = &((fm *)user)->xs[i]; return 0; }

/* interval 0: validation at every epoch's end, top-k checked there (TR_RUN_AT_EPOCH_END); 2: after
   every 2nd batch, top-k checked at the validation's end (TR_RUN_AT_VALIDATION). step<N>.ckpt: after
   every batch (TR_RUN_AT_BATCH). */
static void fm_fit_as(const char *name, const char *resume, int64_t interval, ends *e, char *log, size_t log_cap, tr_err want);
static void fm_fit(const char *name, const char *resume, int64_t interval, ends *e, char *log, size_t log_cap) {
  fm_fit_as(name, resume, interval, e, log, log_cap, TR_OK);
}
static void fm_fit_expect(const char *name, const char *resume, int64_t interval, tr_err want) {
  fm_fit_as(name, resume, interval, NULL, NULL, 0, want);
}
static void fm_fit_as(const char *name, const char *resume, int64_t interval, ends *e, char *log, size_t log_cap, tr_err want) {
  fm m = { 0.5f, 0, { 0.25f, 0.5f, 0.75f, 1.0f }, { 0.5f, 0 }, { 0, 0 } };
  tr_trainer t;
  tr_desc d;
  tr_config c;
  tr_data data;
  hk_registry *reg = hk_create(NULL);
  char *buf = NULL, specs[1200], path[400];
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  watched w;
  assert_non_null(reg);
  memset(&d, 0, sizeof d);
  d.model.params = g_fm_params == 2 ? m.w2 : &m.w;
  d.model.grads = g_fm_params == 2 ? m.g2 : &m.g;
  d.model.n_params = (size_t)g_fm_params;
  d.model.user = &m;
  d.model.forward = fm_forward;
  d.model.backward = fm_backward;
  d.optim.kind = TR_OPTIM_SGD;
  d.optim.lr = 0.1;
  d.reg = reg;
  d.seed = 7;
  d.log = f;
  assert_int_equal(tr_init(&t, &d), TR_OK);
  snprintf(specs, sizeof specs, "csv(save_dir=%s/%s%s); jsonl(save_dir=%s/%s%s); tensorboard(save_dir=%s/%s%s); %s%s%s", g_root,
           name, g_fm_flush, g_root, name, g_fm_flush, g_root, name, g_fm_flush,
           g_fm_ckpt ? g_fm_ckpt : "model_checkpoint(every_n_train_steps=1, save_top_k=-1, filename={step}); "
           "model_checkpoint(monitor=val/loss, mode=max, save_top_k=-1, filename=all-{step})", g_fm_more ? "; " : "",
           g_fm_more ? g_fm_more : "");
  assert_int_equal(hk_spec_apply(reg, specs), HK_OK);
  w = watch(reg);
  add_killer(reg);
  data = test_data(fm_count, fm_get, &m);
  c = test_config(&data, &data, 3);
  c.log_every_n_steps = 1;
  c.val_check_interval = interval;
  c.num_sanity_val_steps = -1;
  c.no_sigint = g_kill_sig != SIGINT;
  c.no_resume_message = 1;
  c.save_to = g_fm_save_to;
  if (resume && resume[0] == '/') snprintf(path, sizeof path, "%s", resume);
  else if (resume) snprintf(path, sizeof path, "%s/%s/lightning_logs/version_0/checkpoints/%s", g_root, name, resume);
  c.resume_from = resume ? path : NULL;
  assert_int_equal(tr_fit(&t, &c), want);
  if (e) *e = ends_of(reg, w);
  fflush(f);
  if (log) snprintf(log, log_cap, "%s", buf ? buf : "");
  tr_free(&t);
  hk_destroy(reg);
  fclose(f);
  free(buf);
}

static void test_trainer_continues(void **state) {
  static const char *const at_epoch_end[] = { "step=5.ckpt", "all-step=4.ckpt", "step=1.ckpt" };
  static const char *const at_validation[] = { "all-step=6.ckpt", "step=6.ckpt", "step=3.ckpt" };
  (void)state;
  resumes_as_uninterrupted(fm_fit, "fit", 0, at_epoch_end, sizeof at_epoch_end / sizeof at_epoch_end[0], 0);
  resumes_as_uninterrupted(fm_fit, "fit2", 2, at_validation, sizeof at_validation / sizeof at_validation[0], 0);
}

/* ---- falling back to a new version ---- */
static void test_symlink_or_gone_falls_back(void **state) {
  char v0[400], moved[400], csv[400], log[4096], *before, *after;
  (void)state;
  lp_run("fb", NULL, 0, NULL, NULL, 0);
  at(v0, sizeof v0, "fb", "lightning_logs/version_0");
  at(moved, sizeof moved, "fb", "elsewhere");
  assert_int_equal(rename(v0, moved), 0);
  assert_int_equal(symlink(moved, v0), 0); /* a symlink planted where the run's directory was */
  at(csv, sizeof csv, "fb", "elsewhere/metrics.csv");
  before = slurp(csv);
  {
    char ckpt[420], mc[420];
    int n, k;
    snprintf(mc, sizeof mc, "%s/checkpoints", moved);
    n = entries(moved);
    k = entries(mc);
    snprintf(ckpt, sizeof ckpt, "%s/fb/b4.ckpt", g_root);
    {
      lp l;
      lp_init(&l, "fb", 0);
      assert_int_equal(tr_run_start(l.reg, &l.ctx, ckpt), TR_OK);
      while (l.ctx.global_step < OWN_STEPS) lp_step(&l);
      assert_int_equal(tr_run_finish(l.reg, &l.ctx, TR_OK), TR_OK);
      snprintf(log, sizeof log, "%s", lp_log(&l));
      lp_free(&l);
    }
    assert_non_null(strstr(log, "does not continue"));
    assert_non_null(strstr(log, "symlink"));
    assert_int_equal(entries(moved), n); /* nothing new there, */
    assert_int_equal(entries(mc), k);    /* model_checkpoint's files included */
  }
  after = slurp(csv);
  assert_string_equal(before, after); /* nothing through the link */
  free(before);
  free(after);
  at(csv, sizeof csv, "fb", "lightning_logs/version_1/metrics.csv");
  assert_true(exists(csv));
  /* gone: the directory removed (moved away here); the resume says so and claims a new one */
  at(v0, sizeof v0, "fb", "lightning_logs/version_1");
  at(moved, sizeof moved, "fb", "gone");
  assert_int_equal(rename(v0, moved), 0);
  {
    char ckpt[420];
    lp l;
    snprintf(ckpt, sizeof ckpt, "%s/fb/b6.ckpt", g_root); /* written by the run in version_1 */
    lp_init(&l, "fb", 0);
    assert_int_equal(tr_run_start(l.reg, &l.ctx, ckpt), TR_OK);
    assert_int_equal(tr_run_finish(l.reg, &l.ctx, TR_OK), TR_OK);
    assert_non_null(strstr(lp_log(&l), "it is gone"));
    lp_free(&l);
  }
}

/* Two resumes of one run at once: the first holds the directory, the second logs elsewhere. */
static void test_two_resumes_at_once(void **state) {
  lp a, b;
  char ckpt[420], v1[400];
  (void)state;
  lp_run("two", NULL, 0, NULL, NULL, 0);
  lp_run("two_ref", NULL, 0, NULL, NULL, 0);
  lp_init(&a, "two", 0);
  lp_init(&b, "two", 0);
  snprintf(ckpt, sizeof ckpt, "%s/two/b4.ckpt", g_root);
  assert_int_equal(tr_run_start(a.reg, &a.ctx, ckpt), TR_OK);
  snprintf(ckpt, sizeof ckpt, "%s/two/v6.ckpt", g_root);
  assert_int_equal(tr_run_start(b.reg, &b.ctx, ckpt), TR_OK);
  assert_non_null(strstr(lp_log(&b), "another process holds it"));
  assert_null(strstr(lp_log(&a), "warning"));
  while (a.ctx.global_step < OWN_STEPS) lp_step(&a);
  while (b.ctx.global_step < OWN_STEPS) lp_step(&b);
  assert_int_equal(tr_run_finish(b.reg, &b.ctx, TR_OK), TR_OK);
  assert_int_equal(tr_run_finish(a.reg, &a.ctx, TR_OK), TR_OK);
  lp_free(&b);
  lp_free(&a);
  {
    char x[400], y[400];
    at(x, sizeof x, "two", "lightning_logs/version_0/metrics.csv");
    at(y, sizeof y, "two_ref", "lightning_logs/version_0/metrics.csv");
    assert_same_file(x, y, 0);
  }
  at(v1, sizeof v1, "two", "lightning_logs/version_1/metrics.csv");
  assert_true(exists(v1));
}

/* Lightning's way, as one option: a new version; the old logs as they were; top-k afresh. */
static void test_new_version_on_resume(void **state) {
  char a[400], log[4096], *before, *after;
  (void)state;
  lp_run("lt", NULL, 0, NULL, NULL, 0);
  at(a, sizeof a, "lt", "lightning_logs/version_0/metrics.csv");
  before = slurp(a);
  lp_run("lt", "b4.ckpt", TR_YES, NULL, log, sizeof log);
  after = slurp(a);
  assert_string_equal(before, after);
  free(before);
  free(after);
  assert_non_null(strstr(log, "afresh"));
  assert_null(strstr(log, "warning"));
  at(a, sizeof a, "lt", "lightning_logs/version_1/metrics.csv");
  assert_true(exists(a));
}

/* A metrics.csv the logger did not write, in the directory a resume continues: left as it is, said. */
static void test_foreign_csv_left_alone(void **state) {
  char a[400], log[4096], *after;
  FILE *f;
  (void)state;
  lp_run("fo", NULL, 0, NULL, NULL, 0);
  at(a, sizeof a, "fo", "lightning_logs/version_0/metrics.csv");
  assert_non_null(f = fopen(a, "w"));
  fputs("name,value\nmine,not a number\n", f);
  fclose(f);
  lp_run("fo", "b4.ckpt", 0, NULL, log, sizeof log);
  after = slurp(a);
  assert_string_equal(after, "name,value\nmine,not a number\n");
  free(after);
  assert_non_null(strstr(log, "is not a metrics.csv this logger wrote"));
}

/* A metrics.csv whose epoch or step cell is no count (nan, 1e300, -1, 2.5: issue 37, item 15, a cast to
   int64 undefined for the first two) is not the logger's: left as it is, and said. */
static void test_csv_odd_counters_left_alone(void **state) {
  static const char *const cell[] = { "nan", "1e300", "-1", "2.5", "inf" };
  char a[400], log[4096], text[200], *after;
  size_t i;
  FILE *f;
  (void)state;
  lp_run("oc", NULL, 0, NULL, NULL, 0);
  at(a, sizeof a, "oc", "lightning_logs/version_0/metrics.csv");
  for (i = 0; i < sizeof cell / sizeof cell[0]; i++) {
    snprintf(text, sizeof text, "epoch,step,train/loss\n0,0,1.5\n0,%s,1.25\n", cell[i]);
    assert_non_null(f = fopen(a, "w"));
    fputs(text, f);
    fclose(f);
    lp_run("oc", "b4.ckpt", 0, NULL, log, sizeof log);
    after = slurp(a);
    assert_string_equal(after, text);
    free(after);
    if (!strstr(log, "is not a metrics.csv this logger wrote")) fail_msg("step %s: %s", cell[i], log);
  }
}

/* A loop that enters its run (tr_run_enter) resumes a file of tr_run_save into its run too: tr_run_enter
   finds the run's block itself. A loop with a format of its own hands it over with tr_run_continue (the
   trainer's does, test_trainer_continues): NULL says the checkpoint holds none (a new version); an
   unreadable block counts as none; during a run it is refused. */
static void entered(const char *name, const char *resume, int give_none, const char *want_leaf) {
  lp l;
  char path[400], want[400];
  lp_init(&l, name, 0);
  snprintf(path, sizeof path, "%s/%s", l.dir, resume);
  if (give_none) assert_int_equal(tr_run_continue(l.reg, NULL, 0), TR_OK);
  assert_int_equal(tr_run_enter(l.reg, &l.ctx, HK_STAGE_FIT, path), TR_OK);
  assert_int_equal(tr_run_continue(l.reg, NULL, 0), TR_ERR_INVALID); /* not during a run */
  HK_FIRE_FLOW(l.reg, HK_SETUP, &l.ctx, &l.flow);
  at(want, sizeof want, name, want_leaf);
  assert_non_null(tr_run_dir(l.reg));
  assert_string_equal(tr_run_dir(l.reg), want);
  HK_FIRE_FLOW(l.reg, HK_TEARDOWN, &l.ctx, &l.flow);
  tr_run_leave(l.reg, &l.ctx);
  lp_free(&l);
}
/* The plot of a continued run shows the whole run (issue 37, item 4: it started at the resume's step):
   metrics.svg of each resume equal to the uninterrupted run's, but for the title (the directory). */
static void test_plot_continues(void **state) {
  static const char *const from[] = { "b4.ckpt", "v6.ckpt", "b5.ckpt" };
  char a[400], b[400], *text;
  size_t i;
  (void)state;
  g_specs = "csv(); plot(metrics=\"train/loss val/loss\")";
  lp_run("plot_ref", NULL, 0, NULL, NULL, 0);
  lp_run("plot", NULL, 0, NULL, NULL, 0);
  at(a, sizeof a, "plot", "lightning_logs/version_0/metrics.svg");
  at(b, sizeof b, "plot_ref", "lightning_logs/version_0/metrics.svg");
  for (i = 0; i < sizeof from / sizeof from[0]; i++) {
    lp_run("plot", from[i], 0, NULL, NULL, 0);
    assert_same_file(a, b, 3);
  }
  assert_non_null(text = slurp(a));
  assert_non_null(strstr(text, "<series name=\"val/loss\">1 ")); /* the first validation (at step 2: Lightning's step 1)'s point */
  free(text);
  g_specs = OWN_SPECS;
}

/* Every file of dir (not below it) as "name size bytes" lines, for a before/after comparison. */
static char *snap(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  while (d && (e = readdir(d)) != NULL) {
    char path[700], *text;
    struct stat st;
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) { fprintf(f, "%s (not a file)\n", e->d_name); continue; }
    text = slurp(path); /* (the bytes up to a NUL: event files compare by their size too) */
    fprintf(f, "%s %lld %s\n", e->d_name, (long long)st.st_size, text ? text : "");
    free(text);
  }
  if (d) closedir(d);
  fclose(f);
  return out;
}
/* A resume that fails to load (issue 37, item 1: the loggers had already cut metrics.csv, 19 rows to 7, and a
   failed resume left an empty version_N): load_model fails, load_model reads less than save_model wrote, the
   trainer's model does not match its checkpoint. No file of the run changes, no version_N is left behind. */
static void test_failed_resume_changes_nothing(void **state) {
  char v0[400], v1[400], ckpt[420], *before, *after, log[4096];
  int mode;
  (void)state;
  g_specs = "csv(); jsonl(); tensorboard(); plot(metrics=\"train/loss\")";
  lp_run("fr", NULL, 0, NULL, NULL, 0);
  at(v0, sizeof v0, "fr", "lightning_logs/version_0");
  at(v1, sizeof v1, "fr", "lightning_logs/version_1");
  before = snap(v0);
  for (mode = 1; mode <= 2; mode++) {
    int nv;
    for (nv = 0; nv <= TR_YES; nv += TR_YES) { /* continuing its run, and Lightning's new version_N */
      lp l;
      lp_init(&l, "fr", nv);
      snprintf(ckpt, sizeof ckpt, "%s/b4.ckpt", l.dir);
      g_bad_load = mode;
      assert_int_equal(tr_run_start(l.reg, &l.ctx, ckpt), TR_ERR_FORMAT);
      assert_int_equal(tr_run_finish(l.reg, &l.ctx, TR_OK), TR_ERR_FORMAT);
      g_bad_load = 0;
      snprintf(log, sizeof log, "%s", tr_run_error(l.reg));
      lp_free(&l);
      assert_non_null(strstr(log, mode == 1 ? "load_model failed" : "load_model read 4 of the model section's 8 bytes"));
      after = snap(v0);
      assert_string_equal(before, after);
      free(after);
      assert_false(exists(v1)); /* no empty version_N */
    }
  }
  free(before);
  /* the trainer: a checkpoint of a model with 1 parameter resumed into one with 2 */
  fm_fit("frt", NULL, 0, NULL, NULL, 0);
  at(v0, sizeof v0, "frt", "lightning_logs/version_0");
  at(v1, sizeof v1, "frt", "lightning_logs/version_1");
  before = snap(v0);
  g_fm_params = 2;
  fm_fit_expect("frt", "step=5.ckpt", 0, TR_ERR_MISMATCH);
  g_fm_params = 1;
  after = snap(v0);
  assert_string_equal(before, after);
  assert_false(exists(v1));
  free(before);
  free(after);
  g_specs = OWN_SPECS;
}

/* tr_fit's save_to in a directory that does not exist (issue 37, item 13): refused at the fit's start. */
static void test_trainer_save_to_dir_missing(void **state) {
  char path[400];
  (void)state;
  snprintf(path, sizeof path, "%s/no_such_dir/last.ckpt", g_root);
  g_fm_save_to = path;
  fm_fit_expect("sto", NULL, 0, TR_ERR_INVALID);
  g_fm_save_to = NULL;
}

/* A run block naming a directory whose last name is "." or ".." (or empty) counts as none (issue 37, item 10: the
   loggers wrote one level up): tr_run_continue says TR_ERR_FORMAT, the run logs into a new version. */
static void put_le(unsigned char *p, uint64_t v, int n) { int i; for (i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static void test_dot_dot_block_refused(void **state) {
  static const char *const leaf[] = { "/..", "/.", "/", "/version_0" };
  unsigned char b[600];
  size_t i;
  (void)state;
  for (i = 0; i < sizeof leaf / sizeof leaf[0]; i++) {
    char dir[400];
    size_t n;
    struct stat st;
    lp l;
    lp_init(&l, "dots", 0);
    snprintf(dir, sizeof dir, "%s/lightning_logs%s", l.dir, leaf[i]);
    n = strlen(dir);
    assert_int_equal(mkdir(l.dir, 0777) == 0 || exists(l.dir), 1);
    stat(l.dir, &st);
    put_le(b, 1, 8);                     /* version */
    put_le(b + 8, n, 4);                 /* the directory */
    memcpy(b + 12, dir, n);
    put_le(b + 12 + n, (uint64_t)st.st_dev, 8);
    put_le(b + 20 + n, (uint64_t)st.st_ino, 8);
    put_le(b + 28 + n, 4, 8);            /* global_step */
    put_le(b + 36 + n, 0, 8);            /* after a batch */
    assert_int_equal(tr_run_continue(l.reg, b, 44 + n), i < 3 ? TR_ERR_FORMAT : TR_OK);
    lp_free(&l);
  }
}

/* A run is known by its run id, not by a path or an inode (issue 37, item 2). The inode of a removed run directory
   is reused (ext4 often, a remounted tmpfs always): here the same directory, emptied, holds another run's records,
   as a reused inode would. Resuming the first run's checkpoint must not rewrite them: a new version_N and one line
   saying why. A directory spelled another way (R/, R/./), moved or copied is continued when its run_id matches.
   An old checkpoint's block (version 1: device and inode, no id) is continued as before. */
static void test_run_known_by_id(void **state) {
  static const char *const spelled[] = { "idc/", "./idc" };
  char a[400], b[400], cmd[1400], *before, *after, log[4096];
  struct stat st0, st1;
  size_t i;
  (void)state;
  lp_run("id_ref", NULL, 0, NULL, NULL, 0);
  /* another run's records in the directory (the same inode) where the resumed run wrote */
  lp_run("ida", NULL, 0, NULL, NULL, 0);
  lp_run("idb", NULL, 0, NULL, NULL, 0);
  at(a, sizeof a, "ida", "lightning_logs/version_0");
  at(b, sizeof b, "idb", "lightning_logs/version_0");
  snprintf(cmd, sizeof cmd, "rm -rf '%s'/* && cp -a '%s'/. '%s'/", a, b, a);
  assert_int_equal(system(cmd), 0);
  at(a, sizeof a, "ida", "lightning_logs/version_0/metrics.csv");
  assert_int_equal(stat(a, &st0), 0);
  before = slurp(a);
  lp_run("ida", "b4.ckpt", 0, NULL, log, sizeof log);
  after = slurp(a);
  assert_string_equal(before, after);
  assert_int_equal(stat(a, &st1), 0);
  assert_true(st0.st_ino == st1.st_ino); /* not replaced */
  free(before);
  free(after);
  if (!strstr(log, "does not continue") || !strstr(log, "another run's")) fail_msg("%s", log);
  at(a, sizeof a, "ida", "lightning_logs/version_1/metrics.csv");
  assert_true(exists(a));
  /* the same directory spelled otherwise, moved, copied: continued */
  lp_run("idc", NULL, 0, NULL, NULL, 0);
  for (i = 0; i < sizeof spelled / sizeof spelled[0]; i++) {
    lp_run(spelled[i], i ? "v6.ckpt" : "b4.ckpt", 0, NULL, log, sizeof log);
    if (strstr(log, "warning") || strstr(log, "afresh")) fail_msg("%s", log);
    assert_logs_equal("idc", "id_ref");
  }
  at(a, sizeof a, "idc", "");
  at(b, sizeof b, "idc_moved", "");
  assert_int_equal(rename(a, b), 0);
  lp_run("idc_moved", "b5.ckpt", 0, NULL, log, sizeof log);
  if (strstr(log, "warning") || strstr(log, "afresh")) fail_msg("%s", log);
  assert_logs_equal("idc_moved", "id_ref");
  at(a, sizeof a, "idc_copy", "");
  snprintf(cmd, sizeof cmd, "cp -a '%s' '%s'", b, a);
  assert_int_equal(system(cmd), 0);
  lp_run("idc_copy", "b4.ckpt", 0, NULL, log, sizeof log);
  if (strstr(log, "warning") || strstr(log, "afresh")) fail_msg("%s", log);
  assert_logs_equal("idc_copy", "id_ref");
  /* a version 1 block (device and inode): continued as before */
  {
    unsigned char blk[600];
    char dir[400], ckpt[420];
    size_t n;
    lp l;
    at(dir, sizeof dir, "id_ref", "lightning_logs/version_0");
    n = strlen(dir);
    assert_int_equal(stat(dir, &st0), 0);
    put_le(blk, 1, 8);
    put_le(blk + 8, n, 4);
    memcpy(blk + 12, dir, n);
    put_le(blk + 12 + n, (uint64_t)st0.st_dev, 8);
    put_le(blk + 20 + n, (uint64_t)st0.st_ino, 8);
    put_le(blk + 28 + n, 4, 8);
    put_le(blk + 36 + n, 0, 8);
    lp_init(&l, "id_ref", 0);
    snprintf(ckpt, sizeof ckpt, "%s/b4.ckpt", l.dir);
    assert_int_equal(tr_run_continue(l.reg, blk, 44 + n), TR_OK);
    assert_int_equal(tr_run_enter(l.reg, &l.ctx, HK_STAGE_FIT, ckpt), TR_OK);
    HK_FIRE_FLOW(l.reg, HK_SETUP, &l.ctx, &l.flow);
    assert_non_null(tr_run_dir(l.reg));
    assert_string_equal(tr_run_dir(l.reg), dir);
    HK_FIRE_FLOW(l.reg, HK_TEARDOWN, &l.ctx, &l.flow);
    tr_run_leave(l.reg, &l.ctx);
    lp_free(&l);
  }
}

/* ---- an epoch loop of your own (examples/epoch_loop.c's shape: tr_run_begin, tr_run_next, tr_run_update,
   tr_run_end): loss = 1 + p0^2, SGD, 3 epochs of 4 batches, a validation of 2 batches at each epoch's end (val/loss
   not monotone: the 3rd epoch's is the worst); a checkpoint kept from each (version_N/checkpoints/epoch=E.ckpt),
   the best 2 (best-epoch=E.ckpt) and early_stopping watched. A run_fn (arg unused). ---- */
static int ep_save(void *user, FILE *f) { return fwrite(user, 2 * sizeof(float), 1, f) != 1; }
static int ep_load(void *user, FILE *f) { return fread(user, 2 * sizeof(float), 1, f) != 1; }
static void ep_run(const char *name, const char *resume, int64_t arg, ends *e, char *log, size_t log_cap) {
  float p[2] = { 1.0f, 0 }, g[2] = { 0, 0 };
  hk_tensor pv[] = { { "p", p, 2, 0 } }, gv[] = { { "p", g, 2, 0 } };
  hk_registry *reg = hk_create(NULL);
  hk_ctx *ctx;
  memlog ml;
  char dir[300];
  int what;
  (void)arg;
  snprintf(dir, sizeof dir, "%s/%s", g_root, name);
  assert_non_null(memlog_open(&ml));
  ctx = tr_run_begin(reg, &(tr_run_desc){ .max_epochs = 3, .train_batches = 4, .val_batches = 2, .lr = 0.1,
                                          .log_every_n_steps = 1, TR_VIEWS(pv, gv), .save_model = ep_save, .load_model = ep_load,
                                          .model_user = p, .save_dir = dir, .log = ml.f, .no_signals = 1, .no_resume_message = 1,
                                          .spec = OWN_SPECS "; model_checkpoint(save_top_k=-1, filename={epoch}); model_checkpoint("
                                                  "monitor=val/loss, save_top_k=2, filename=best-{epoch}); early_stopping(monitor="
                                                  "val/loss, patience=50)" }, resume);
  assert_non_null(ctx);
  while ((what = tr_run_next(reg))) {
    ctx->loss = 1.0 + (double)p[0] * p[0] + (what == TR_RUN_VAL_BATCH ? 0.25 * (double)ctx->batch_idx + 0.1 * (double)ctx->epoch : 0);
    if (what == TR_RUN_VAL_BATCH) continue;
    g[0] = 2 * p[0];
    g[1] = 0.5f;
    if (tr_run_update(reg)) { p[0] -= (float)ctx->lr * g[0]; p[1] -= (float)ctx->lr * g[1]; }
  }
  if (tr_run_end(reg) != TR_OK) fail_msg("%s", memlog_text(&ml));
  if (e) {
    watched w = { hk_spec_find(reg, "model_checkpoint", 1), hk_spec_find(reg, "early_stopping", 0) };
    *e = ends_of(reg, w);
  }
  if (log) snprintf(log, log_cap, "%s", memlog_text(&ml));
  hk_destroy(reg);
  memlog_close(&ml);
}

/* A version directory renamed to another leaf under save_dir/name (version_0 -> baseline): its last name is
   gone, so it is found by its run_id and continued, held as ever (a second resume meanwhile logs elsewhere).
   Two directories there with the run's id (a copy): neither is continued, a new version, said. A renamed
   directory of another run is left untouched. The trainer and an epoch loop of your own: the same. */
/* Renames save_dir/na/a to save_dir/nb/b. */
static void move(const char *na, const char *a, const char *nb, const char *b) {
  char from[400], to[400];
  at(from, sizeof from, na, a);
  at(to, sizeof to, nb, b);
  assert_int_equal(rename(from, to), 0);
}
static void assert_renamed_continued(const char *name, const char *ref, const char *log) {
  char a[400], b[400];
  if (strstr(log, "does not continue") || strstr(log, "afresh")) fail_msg("%s", log); /* (top-k: its files moved too) */
  at(a, sizeof a, name, "lightning_logs/baseline/metrics.csv");
  at(b, sizeof b, ref, "lightning_logs/version_0/metrics.csv");
  assert_same_file(a, b, 0); /* each step once: the rows continued */
  at(a, sizeof a, name, "lightning_logs/baseline/metrics.jsonl");
  at(b, sizeof b, ref, "lightning_logs/version_0/metrics.jsonl");
  assert_same_file(a, b, 1);
  at(a, sizeof a, name, "lightning_logs");
  assert_int_equal(entries(a), 1); /* no new version_N */
}
/* A copy of baseline beside it: two directories hold the run's id; a resume from the checkpoint (whose block names
   the gone version_0) rewrites neither, says why and logs into a new version_0. */
static void copy_not_continued(run_fn run, const char *name, const char *resume) {
  char a[400], b[400], cmd[1000], log[8192], *x, *y;
  at(a, sizeof a, name, "lightning_logs/baseline");
  at(b, sizeof b, name, "lightning_logs/baseline_copy");
  snprintf(cmd, sizeof cmd, "cp -a '%s' '%s'", a, b);
  assert_int_equal(system(cmd), 0);
  at(a, sizeof a, name, "lightning_logs/baseline/metrics.csv");
  at(b, sizeof b, name, "lightning_logs/baseline_copy/metrics.csv");
  x = slurp(a);
  run(name, resume, 0, NULL, log, sizeof log);
  if (!strstr(log, "does not continue") || !strstr(log, "both baseline and baseline_copy") ||
      !strstr(log, "it logs into a new directory of that name instead")) /* (version_0 again) */
    fail_msg("%s", log);
  y = slurp(a);
  assert_string_equal(x, y);
  free(y);
  y = slurp(b);
  assert_string_equal(x, y);
  free(y);
  free(x);
  at(a, sizeof a, name, "lightning_logs/version_0/metrics.csv"); /* (the leaf's name was free again) */
  assert_true(exists(a));
}
/* NAME_ref and NAME run to the end; NAME's version_0 renamed to baseline; a resume from its checkpoint ckpt
   (in baseline/checkpoints) continues in baseline as NAME_ref ran, its callbacks ending where NAME_ref's did (the
   top-k files moved with the directory); then a copy of it beside: not continued. */
static void renamed_then_resumed(run_fn run, const char *name, const char *ckpt) {
  char ref[64], dir[400], path[500], log[8192];
  ends a, b;
  snprintf(ref, sizeof ref, "%s_ref", name);
  run(ref, NULL, 0, &a, NULL, 0);
  run(name, NULL, 0, NULL, NULL, 0);
  move(name, "lightning_logs/version_0", name, "lightning_logs/baseline");
  at(dir, sizeof dir, name, "lightning_logs/baseline/checkpoints");
  snprintf(path, sizeof path, "%s/%s", dir, ckpt);
  run(name, path, 0, &b, log, sizeof log);
  assert_renamed_continued(name, ref, log);
  assert_ends(b, a);
  copy_not_continued(run, name, path); /* (ckpt is not rewritten by the resume from it: its block names version_0) */
}
static void test_renamed_leaf_continues(void **state) {
  char a[400], b[400], c[400], ckpt[420], cmd[1000], log[8192], *x, *y;
  lp p, q;
  ends ref, got;
  (void)state;
  lp_run("rn_ref", NULL, 0, &ref, NULL, 0);
  lp_run("rn", NULL, 0, NULL, NULL, 0);
  move("rn", "lightning_logs/version_0", "rn", "lightning_logs/baseline");
  lp_run("rn", "b4.ckpt", 0, &got, log, sizeof log);
  assert_null(strstr(log, "warning"));
  assert_renamed_continued("rn", "rn_ref", log);
  assert_ends(got, ref);
  /* its freed name claimed by a fresh run (version_0 again): the renamed one is still found by its run id */
  lp_run("rt", NULL, 0, NULL, NULL, 0);
  move("rt", "lightning_logs/version_0", "rt", "lightning_logs/baseline");
  move("rt", "b4.ckpt", "rt", "own.ckpt"); /* (the fresh run writes b4.ckpt again) */
  lp_run("rt", NULL, 0, NULL, NULL, 0);
  at(c, sizeof c, "rt", "lightning_logs/version_0/metrics.csv");
  x = slurp(c);
  lp_run("rt", "own.ckpt", 0, NULL, log, sizeof log);
  if (strstr(log, "does not continue")) fail_msg("%s", log);
  at(a, sizeof a, "rt", "lightning_logs/baseline/metrics.csv");
  at(b, sizeof b, "rn_ref", "lightning_logs/version_0/metrics.csv");
  assert_same_file(a, b, 0);
  y = slurp(c); /* the fresh run's own, untouched */
  assert_string_equal(x, y);
  free(x);
  free(y);
  at(a, sizeof a, "rt", "lightning_logs");
  assert_int_equal(entries(a), 2);
  /* held by a resume of the run: a second one at once logs into a new version, said (the renamed name) */
  lp_init(&p, "rn", 0);
  lp_init(&q, "rn", 0);
  snprintf(ckpt, sizeof ckpt, "%s/b4.ckpt", p.dir);
  assert_int_equal(tr_run_start(p.reg, &p.ctx, ckpt), TR_OK);
  assert_int_equal(tr_run_start(q.reg, &q.ctx, ckpt), TR_OK);
  assert_null(strstr(lp_log(&p), "warning"));
  if (!strstr(lp_log(&q), "does not continue in") || !strstr(lp_log(&q), "/baseline (where") ||
      !strstr(lp_log(&q), "another process holds it"))
    fail_msg("%s", lp_log(&q));
  assert_int_equal(tr_run_finish(q.reg, &q.ctx, TR_OK), TR_OK);
  assert_int_equal(tr_run_finish(p.reg, &p.ctx, TR_OK), TR_OK);
  lp_free(&q);
  lp_free(&p);
  at(a, sizeof a, "rn", "lightning_logs/version_0");
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", a); /* (the second resume's version) */
  assert_int_equal(system(cmd), 0);
  copy_not_continued(own_run_as, "rn", "b4.ckpt"); /* b4.ckpt's block: version_0 (its later ones: baseline) */
  /* another run's directory renamed there, the run's own gone: left untouched, a new version */
  lp_run("rf", NULL, 0, NULL, NULL, 0);
  lp_run("rf_other", NULL, 0, NULL, NULL, 0);
  move("rf", "lightning_logs/version_0", "rf", "away");
  move("rf_other", "lightning_logs/version_0", "rf", "lightning_logs/baseline");
  at(a, sizeof a, "rf", "lightning_logs/baseline/metrics.csv");
  x = slurp(a);
  at(b, sizeof b, "rf", "lightning_logs/baseline");
  {
    int n = entries(b);
    lp_run("rf", "b4.ckpt", 0, NULL, log, sizeof log);
    assert_int_equal(entries(b), n);
  }
  if (!strstr(log, "it is gone")) fail_msg("%s", log);
  y = slurp(a);
  assert_string_equal(x, y);
  free(x);
  free(y);
  at(a, sizeof a, "rf", "lightning_logs/version_0/metrics.csv");
  assert_true(exists(a));
  /* the trainer: the same, from the renamed directory's checkpoint */
  renamed_then_resumed(fm_fit, "rnf", "step=5.ckpt");
}
/* An epoch loop of your own: the same, from the checkpoint of the first epoch's end (the resumed records go on
   with epochs 1 and 2 in baseline). */
static void test_renamed_leaf_epoch_loop(void **state) {
  (void)state;
  renamed_then_resumed(ep_run, "rne", "epoch=0.ckpt");
}

static void test_entered_loop_continues(void **state) {
  lp l;
  (void)state;
  lp_run("entered", NULL, 0, NULL, NULL, 0);
  entered("entered", "b4.ckpt", 0, "lightning_logs/version_0");
  entered("entered", "b4.ckpt", 1, "lightning_logs/version_1");
  lp_init(&l, "entered", 0);
  assert_int_equal(tr_run_continue(l.reg, "\1\2\3", 3), TR_ERR_FORMAT);
  lp_free(&l);
}

/* ---- resumed after a kill -9 or a Ctrl-C mid-way (issue 37, items 3 and 18) ----
   The reference runs uninterrupted under the same name, then is moved to <name>_ref, so that every file,
   the hparams line that names the run's directory included, can be compared byte for byte. */

/* TensorBoard's reading of a version directory: its event files in name order, every scalar (step, tag,
   value) in the order read, where a SessionLog START at step s drops what was read with a step >= s
   (TensorBoard's purge of orphaned data, EventAccumulator._Purge). As "step tag value" lines. */
static int pb_field(const unsigned char *p, size_t n, size_t *at, int *field, uint64_t *v, const unsigned char **b) {
  uint64_t key = 0;
  int shift, wire;
  for (shift = 0; *at < n; shift += 7) { key |= (uint64_t)(p[*at] & 0x7f) << shift; if (!(p[(*at)++] & 0x80)) break; }
  if (*at > n || (!key && *at >= n)) return -1;
  *field = (int)(key >> 3);
  wire = (int)(key & 7);
  *b = p + *at;
  if (wire == 0 || wire == 2) {
    *v = 0;
    for (shift = 0; *at < n; shift += 7) { *v |= (uint64_t)(p[*at] & 0x7f) << shift; if (!(p[(*at)++] & 0x80)) break; }
    *b = p + *at;
    if (wire == 2) { if (*v > n - *at) return -1; *at += (size_t)*v; }
  } else if (wire == 5) { if (n - *at < 4) return -1; *at += 4; }
  else if (wire == 1) { if (n - *at < 8) return -1; *at += 8; }
  else return -1;
  return wire;
}
typedef struct scalar { int64_t step; char tag[64]; float v; } scalar;
static int dir_events(const struct dirent *e) { return !strncmp(e->d_name, "events.out.tfevents.", 20); }
static char *tb_scalars(const char *dir) {
  struct dirent **names;
  int n = scandir(dir, &names, dir_events, alphasort), i;
  scalar *all = NULL;
  size_t count = 0, k, len = 0;
  char *out = NULL;
  FILE *f;
  for (i = 0; i < n; i++) {
    char path[700];
    unsigned char *d;
    size_t at = 0, size;
    struct stat st;
    FILE *in;
    snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
    free(names[i]);
    assert_int_equal(stat(path, &st), 0);
    size = (size_t)st.st_size;
    assert_non_null(d = (unsigned char *)malloc(size + 1));
    assert_non_null(in = fopen(path, "rb"));
    assert_int_equal(fread(d, 1, size, in), size);
    fclose(in);
    while (size - at >= 16) { /* length, its CRC, the Event, its CRC */
      uint64_t elen = 0, v;
      size_t eat = 0;
      const unsigned char *ev = d + at + 12, *b;
      int field, wire;
      int64_t step = 0;
      size_t first = count;
      for (k = 0; k < 8; k++) elen |= (uint64_t)d[at + k] << (8 * k);
      assert_true(elen <= size - at - 16);
      while ((wire = pb_field(ev, (size_t)elen, &eat, &field, &v, &b)) >= 0) {
        if (field == 2 && wire == 0) step = (int64_t)v;
        else if (field == 7 && wire == 2) { /* SessionLog{status START}: the purge */
          size_t sat = 0;
          int sf;
          uint64_t sv;
          const unsigned char *sb;
          while (pb_field(b, (size_t)v, &sat, &sf, &sv, &sb) >= 0)
            if (sf == 1 && sv == 1) {
              size_t w = 0;
              for (k = 0; k < count; k++) if (all[k].step < step) all[w++] = all[k];
              count = first = w;
            }
        } else if (field == 5 && wire == 2) { /* Summary{value: Value{tag, simple_value}} */
          size_t vat = 0, len5 = (size_t)v;
          const unsigned char *sum = b, *vb;
          int vf;
          uint64_t vv;
          while (pb_field(sum, len5, &vat, &vf, &vv, &vb) >= 0) {
            size_t tat = 0;
            int tf, tw, has = 0;
            uint64_t tv;
            const unsigned char *tb;
            scalar one;
            if (vf != 1) continue;
            memset(&one, 0, sizeof one);
            while ((tw = pb_field(vb, (size_t)vv, &tat, &tf, &tv, &tb)) >= 0) {
              if (tf == 1 && tw == 2) memcpy(one.tag, tb, tv < sizeof one.tag - 1 ? (size_t)tv : sizeof one.tag - 1);
              if (tf == 2 && tw == 5) { memcpy(&one.v, tb, 4); has = 1; }
            }
            if (!has) continue;
            assert_non_null(all = (scalar *)realloc(all, (count + 1) * sizeof *all));
            all[count++] = one;
          }
        }
      }
      for (k = first; k < count; k++) all[k].step = step; /* the Event's step (its field may follow the summary) */
      at += 16 + (size_t)elen;
    }
    assert_int_equal(at, size); /* whole records only */
    free(d);
  }
  free(names);
  f = open_memstream(&out, &len);
  for (k = 0; k < count; k++) fprintf(f, "%lld %s %.9g\n", (long long)all[k].step, all[k].tag, (double)all[k].v);
  fclose(f);
  free(all);
  return out;
}
/* name's run equal to name_ref's: metrics.csv, metrics.jsonl, hparams.yaml and metrics.svg (when there) byte
   for byte; what TensorBoard reads from the event files (tb_scalars) the same scalars in the same order; no
   second version_N. */
static void assert_same_run(const char *name) {
  static const char *const file[] = { "metrics.csv", "metrics.jsonl", "hparams.yaml", "metrics.svg" };
  char ref[100], a[400], b[400], *x, *y;
  size_t i;
  snprintf(ref, sizeof ref, "%s_ref", name);
  for (i = 0; i < sizeof file / sizeof file[0]; i++) {
    at(a, sizeof a, name, "lightning_logs/version_0/");
    at(b, sizeof b, ref, "lightning_logs/version_0/");
    strcat(a, file[i]);
    strcat(b, file[i]);
    if (i < 3 || exists(b)) assert_same_file(a, b, 0);
  }
  at(a, sizeof a, name, "lightning_logs/version_0");
  at(b, sizeof b, ref, "lightning_logs/version_0");
  x = tb_scalars(a);
  y = tb_scalars(b);
  if (strcmp(x, y)) fprintf(stderr, "tensorboard reads from %s:\n%s\nfrom %s:\n%s\n", a, x, b, y);
  assert_string_equal(x, y);
  assert_non_null(strstr(y, " train/loss "));
  free(x);
  free(y);
  at(a, sizeof a, name, "lightning_logs/version_1");
  assert_false(exists(a));
}
/* The reference: name run to its end, then moved to name_ref. */
static void move_to_ref(const char *name) {
  char a[400], b[400];
  snprintf(a, sizeof a, "%s/%s", g_root, name);
  snprintf(b, sizeof b, "%s/%s_ref", g_root, name);
  assert_int_equal(rename(a, b), 0);
}
/* run(name) in a child process that the killer hook ends with SIGKILL at step `step` */
static void run_killed(void (*run)(const char *name), const char *name, int64_t step, int at_batch) {
  pid_t pid;
  int st;
  fflush(NULL);
  assert_true((pid = fork()) >= 0);
  if (pid == 0) {
    g_kill_sig = SIGKILL;
    g_kill_step = step;
    g_kill_at_batch = at_batch;
    run(name);
    _exit(3); /* not killed */
  }
  assert_int_equal(waitpid(pid, &st, 0), pid);
  if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) fail_msg("%s: the run was not killed (status %d)", name, st);
}
static void own_run(const char *name) { lp_run(name, NULL, 0, NULL, NULL, 0); }
static void fit_run(const char *name) { fm_fit(name, NULL, 0, NULL, NULL, 0); }
/* NAME run to its end (kept as the reference), run again and killed with SIGKILL at step (run_killed's at_batch),
   resumed from ckpt: the same run as the reference. */
static void killed_then_resumed(void (*run)(const char *), run_fn resume, const char *name, int64_t step, int at_batch,
                                const char *ckpt) {
  run(name);
  move_to_ref(name);
  run_killed(run, name, step, at_batch);
  resume(name, ckpt, 0, NULL, NULL, 0);
  assert_same_run(name);
}

/* kill -9 right after a checkpoint was written (issue 37, item 3: the records still buffered then were lost, and
   the resume continues from the checkpoint's step, so those steps were missing for good): the loggers write
   what waits at on_save_checkpoint. Own loop (after batch 5; after batch 4, whose validation the resume logs
   again) and tr_fit (mid-epoch), with csv, jsonl, tensorboard and plot at their default flush (once a second). */
static void test_killed_after_checkpoint(void **state) {
  static const struct { const char *name; int64_t step; const char *ckpt; } own[] = { { "k9a", 5, "b5.ckpt" }, { "k9b", 4, "b4.ckpt" } };
  char more[400];
  size_t i;
  (void)state;
  g_specs = "csv(); jsonl(); tensorboard(); plot(metrics=\"train/loss val/loss\")";
  for (i = 0; i < sizeof own / sizeof own[0]; i++) killed_then_resumed(own_run, own_run_as, own[i].name, own[i].step, 0, own[i].ckpt);
  g_specs = OWN_SPECS;
  snprintf(more, sizeof more, "plot(save_dir=%s/k9fit, metrics=\"train/loss val/loss\")", g_root);
  g_fm_more = more;
  killed_then_resumed(fit_run, fm_fit, "k9fit", 6, 0, "step=6.ckpt");
  g_fm_more = NULL;
}

/* Resumes of runs interrupted mid-way, the raw files compared (issue 37, item 18: the resume tests started from
   finished runs, so a resume that logged nothing passed, and TensorBoard's "each step once" was checked only
   through readers that drop older copies). tr_fit with a checkpoint every 3 steps:
     - kill -9 as step 8's batch starts, every record written at once (flush_every=1): the files hold steps
       the checkpoint (step 6) does not, which the resume supersedes;
     - Ctrl-C as step 7's batch starts: the step ends, its state goes to save_to, the fit ends
       TR_ERR_INTERRUPTED; resumed from save_to.
   Each against an uninterrupted run: metrics.csv, metrics.jsonl, hparams.yaml, metrics.svg byte for byte (no
   timestamps in them); the event files (their wall times differ) as TensorBoard reads them: the same scalars,
   each (step, tag) as often and in the same order as the uninterrupted run's, after the purge at each
   SessionLog START (tb_scalars). */
static void test_interrupted_resumes_raw(void **state) {
  char more[400], save_to[400];
  (void)state;
  g_fm_ckpt = "model_checkpoint(every_n_train_steps=3, save_top_k=-1, filename={step})";
  g_fm_flush = ", flush_every=1";
  snprintf(more, sizeof more, "plot(save_dir=%s/k9mid, metrics=\"train/loss val/loss\")", g_root);
  g_fm_more = more;
  killed_then_resumed(fit_run, fm_fit, "k9mid", 8, 1, "step=6.ckpt");
  g_fm_flush = "";
  snprintf(more, sizeof more, "plot(save_dir=%s/ctrlc, metrics=\"train/loss val/loss\")", g_root);
  snprintf(save_to, sizeof save_to, "%s/ctrlc_last.ckpt", g_root);
  g_fm_save_to = save_to;
  fit_run("ctrlc");
  move_to_ref("ctrlc");
  g_kill_sig = SIGINT;
  g_kill_step = 7;
  g_kill_at_batch = 1;
  fm_fit_as("ctrlc", NULL, 0, NULL, NULL, 0, TR_ERR_INTERRUPTED);
  g_kill_sig = 0;
  assert_int_equal(g_kill_step, -1); /* it was raised */
  fm_fit("ctrlc", save_to, 0, NULL, NULL, 0);
  assert_same_run("ctrlc");
  g_fm_save_to = NULL;
  g_fm_ckpt = g_fm_more = NULL;
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_own_loop_continues),
    cmocka_unit_test(test_trainer_continues),
    cmocka_unit_test(test_symlink_or_gone_falls_back),
    cmocka_unit_test(test_two_resumes_at_once),
    cmocka_unit_test(test_new_version_on_resume),
    cmocka_unit_test(test_foreign_csv_left_alone),
    cmocka_unit_test(test_entered_loop_continues),
    cmocka_unit_test(test_plot_continues),
    cmocka_unit_test(test_csv_odd_counters_left_alone),
    cmocka_unit_test(test_failed_resume_changes_nothing),
    cmocka_unit_test(test_trainer_save_to_dir_missing),
    cmocka_unit_test(test_dot_dot_block_refused),
    cmocka_unit_test(test_run_known_by_id),
    cmocka_unit_test(test_renamed_leaf_continues),
    cmocka_unit_test(test_renamed_leaf_epoch_loop),
    cmocka_unit_test(test_killed_after_checkpoint),
    cmocka_unit_test(test_interrupted_resumes_raw),
  };
  if (argc == 3 && !strcmp(argv[1], "--tb")) { /* the runs stay in DIR */
    snprintf(g_root, sizeof g_root, "%s", argv[2]);
    if (mkdir(g_root, 0777) != 0 && !exists(g_root)) return 2;
    if (getenv("TEST_ONLY")) cmocka_set_test_filter(getenv("TEST_ONLY"));
    return cmocka_run_group_tests(tests, NULL, NULL);
  }
  return run_tests_in_dir(tests, "test_continue", g_root); /* one test: TEST_ONLY=test_plot_continues */
}
