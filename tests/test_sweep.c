/* tests/test_sweep.c - train.h's sweep runner (tr_sweep, Hydra's multirun) and hooks.h's lifecycle
   events, with a job that is a small loop of its own on the run layer.

   cmocka tests:
     - jobs are the cartesian product, the last key varying fastest (Hydra's basic sweeper); each job
       sees its values in the program's fields, which get their old values back at the end; each job
       writes into version_<job> of the sweep's own version_N, with overrides.yaml and its
       hyperparameters (hparams.yaml); summary.csv and summary.svg compare the final metrics
     - the lifecycle: on_multirun_start, per job on_job_start / on_job_end, on_multirun_end; start
       events in registration order, end events reversed; on_job_end sees the job's status, error and
       final metrics (tr_sweep_current, ctx's metrics); one job without -m is a plain run (on_run_*)
     - a failing job: reported, the sweep goes on, the summary says so; stop_on_failure skips the rest
     - bad overrides (unknown key, bad value for the type, empty list or value, a key twice, a spec
       parameter the factory lacks or a value it refuses, a factory not in the spec, not key=value):
       refused before any job, with the key and what is accepted; nothing made on disk
     - spec parameters: set or added in every item of the factory, quoted when they need it
     - hooks' signals: HK_STOP at on_job_end ends the sweep; HK_FAIL at on_job_start fails the job
       unrun; at on_multirun_start no job runs
     - lifecycle hooks registered from a spec string (a factory of the program on the sweep's registry)
     - a symlink planted at summary.csv is neither followed nor replaced (TR_ERR_IO, after every job) */
#include "test.h"


static char g_root[256];
static char g_dir[512]; /* this test's save_dir */

static int exists(const char *path) { struct stat st; return stat(path, &st) == 0; }
static void fresh_dir(const char *name) {
  snprintf(g_dir, sizeof g_dir, "%s/%s", g_root, name);
}

/* ---- the program: its fields and its job ---------------------------------------------------------- */
static double g_lr = 0.5;
static int g_batch = 7, g_flag = 0;
static const char *g_name = "base";
static const tr_sweep_field g_fields[] = {
  { "optim.lr", TR_SWEEP_DOUBLE, &g_lr }, { "batch", TR_SWEEP_INT, &g_batch },
  { "name", TR_SWEEP_STRING, &g_name }, { "flag", TR_SWEEP_BOOL, &g_flag },
};
#define N_FIELDS ((int)(sizeof g_fields / sizeof g_fields[0]))

static char g_seen[2048];    /* what the jobs saw, in order */
static double g_fail_lr = -1; /* a job with this lr fails */
static const char *g_fail_text; /* ... with this error (NULL: "lr ... diverged") */
static int g_die_at = -1;     /* the job whose process is killed */
static int g_jobs_run;
static char g_specs[8][256]; /* each job's spec */

static tr_err job_fn(hk_registry *reg, tr_sweep_job *job, void *user) {
  hk_ctx ctx;
  hk_flow flow;
  tr_run_desc rd = *job->run;
  tr_err e = TR_OK;
  int s;
  (void)user;
  g_jobs_run++;
  snprintf(g_seen + strlen(g_seen), sizeof g_seen - strlen(g_seen), "%s%g/%d/%s/%d", g_seen[0] ? " " : "", g_lr, g_batch, g_name, g_flag);
  if (job->index < 8) snprintf(g_specs[job->index], sizeof g_specs[0], "%s", job->spec);
  rd.epochs = TR_NO;
  rd.max_steps = 3;
  rd.log_every_n_steps = 1;
  rd.no_signals = 1;
  if (tr_run_setup(reg, &rd)) return TR_ERR_INVALID;
  memset(&ctx, 0, sizeof ctx);
  memset(&flow, 0, sizeof flow);
  if (tr_run_start(reg, &ctx, NULL) == TR_OK)
    for (s = 0; s < 3; s++) {
      unsigned next;
      ctx.loss = g_lr * g_batch / (s + 1);
      ctx.global_step++;
      HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);
      next = tr_run_batch_end(reg, &ctx, &flow);
      hk_flow_clear(&flow, HK_FLOW_BATCH_SIGNALS);
      if (next & TR_RUN_STOP) break;
    }
  hk_metric_set(&ctx, "val/loss", g_lr * g_batch);
  tr_run_log(reg, &ctx, "val");
  HK_FIRE(reg, HK_ON_VALIDATION_END, &ctx);
  if (g_lr == g_fail_lr && g_fail_text) tr_run_fail(reg, TR_ERR_MODEL, "%s", g_fail_text);
  else if (g_lr == g_fail_lr) tr_run_fail(reg, TR_ERR_MODEL, "lr %g diverged", g_lr);
  if (job->index == g_die_at) kill(getpid(), SIGKILL); /* the process dies in this job (a crash, an abort, the OOM killer) */
  e = tr_run_finish(reg, &ctx, TR_OK);
  if (!e) tr_sweep_metric(job, "score", 100 * g_lr + g_batch);
  hk_ctx_free(&ctx);
  return e;
}

static tr_sweep_desc base_desc(void) {
  tr_sweep_desc d = { .fields = g_fields, .n_fields = N_FIELDS, .job = job_fn, .save_dir = g_dir,
                      .spec = "early_stopping(monitor=val/loss, patience=3, check_on_train_epoch_end=false); csv",
                      .run = { .save_dir = g_dir }, .log = tmpfile() };
  return d;
}
static void reset(void) {
  g_seen[0] = 0;
  g_fail_lr = -1;
  g_fail_text = NULL;
  g_die_at = -1;
  g_jobs_run = 0;
  memset(g_specs, 0, sizeof g_specs);
}

static tr_err sweep(tr_sweep_desc *d, tr_sweep_result *res, int argc, const char **argv) {
  tr_err e = tr_sweep(d, argc, (char **)argv, res);
  if (d->log) fclose(d->log);
  d->log = NULL;
  return e;
}

/* ---- the tests ------------------------------------------------------------------------------------ */
static void test_sweep_product_dirs_summary(void **state) {
  const char *argv[] = { "optim.lr=0.1,0.2", "batch=1,2,3", "name=x" };
  tr_sweep_desc d;
  tr_sweep_result res;
  char path[1024], *text;
  int j;
  (void)state;
  reset();
  fresh_dir("product");
  d = base_desc();
  assert_int_equal(sweep(&d, &res, 3, argv), TR_OK);
  assert_int_equal(res.jobs, 6);
  assert_int_equal(res.ok, 6);
  assert_int_equal(res.multirun, 1);
  assert_string_equal(g_seen, "0.1/1/x/0 0.1/2/x/0 0.1/3/x/0 0.2/1/x/0 0.2/2/x/0 0.2/3/x/0");
  assert_true(g_lr == 0.5 && g_batch == 7 && !strcmp(g_name, "base")); /* restored */
  snprintf(path, sizeof path, "%s/version_0", g_dir);
  assert_string_equal(res.dir, path);
  for (j = 0; j < 6; j++) {
    snprintf(path, sizeof path, "%s/version_0/version_%d/metrics.csv", g_dir, j);
    assert_true(exists(path));
  }
  snprintf(path, sizeof path, "%s/version_0/version_4/overrides.yaml", g_dir);
  assert_non_null(text = slurp(path));
  assert_string_equal(text, "- \"optim.lr=0.2\"\n- \"batch=2\"\n- \"name=x\"\n");
  free(text);
  snprintf(path, sizeof path, "%s/version_0/version_4/hparams.yaml", g_dir);
  assert_non_null(text = slurp(path));
  assert_non_null(strstr(text, "batch: 2\n"));
  assert_non_null(strstr(text, "optim.lr: 0.2\n"));
  assert_non_null(strstr(text, "name: x\n"));
  assert_non_null(strstr(text, "flag: false\n")); /* typed (tr_run_hparam_bool) */
  free(text);
  snprintf(path, sizeof path, "%s/version_0/summary.csv", g_dir);
  assert_non_null(text = slurp(path));
  assert_non_null(strstr(text, "job,status,optim.lr,batch,name,score,train/loss,val/loss,error\n"));
  assert_non_null(strstr(text, "\n4,ok,0.2,2,x,22,0.13333333333333333,0.4,\n"));
  free(text);
  snprintf(path, sizeof path, "%s/version_0/summary.svg", g_dir);
  assert_non_null(text = slurp(path));
  assert_non_null(strstr(text, ">job</text>"));
  assert_non_null(strstr(text, ">val/loss</text>"));
  free(text);
  /* a second sweep claims the next version_N */
  reset();
  d = base_desc();
  assert_int_equal(sweep(&d, &res, 1, argv), TR_OK);
  snprintf(path, sizeof path, "%s/version_1", g_dir);
  assert_string_equal(res.dir, path);
}

/* ---- the lifecycle ---- */
static char g_log[2048];
static hk_signal g_signal_at[HK_MAX_EVENTS];
static void log_add(const char *s) { snprintf(g_log + strlen(g_log), sizeof g_log - strlen(g_log), "%s%s", g_log[0] ? " " : "", s); }
static hk_signal life(hk_ctx *ctx, void *user) {
  char line[256];
  const tr_sweep_job *j = tr_sweep_current(ctx);
  const char *ev = hk_event_name(ctx->reg, ctx->event) + 3; /* without "on_" */
  if (ctx->event == HK_ON_JOB_END) {
    double v = -1;
    hk_metric_get(ctx, "val/loss", &v);
    snprintf(line, sizeof line, "%s:%s#%d(%s,%g,%s)", ev, (const char *)user, j->index, tr_err_name(j->status), v, j->error);
  } else if (ctx->event == HK_ON_JOB_START) {
    assert_int_equal(hk_metric_count(ctx), 0); /* the last job's metrics are gone */
    snprintf(line, sizeof line, "%s:%s#%d", ev, (const char *)user, j->index);
  } else {
    assert_null(j);
    snprintf(line, sizeof line, "%s:%s", ev, (const char *)user);
  }
  log_add(line);
  return g_signal_at[ctx->event];
}
static hk_registry *life_reg(void) {
  hk_registry *reg = hk_create(NULL);
  static const char *const names[] = { "a", "b" };
  int i;
  g_log[0] = 0;
  memset(g_signal_at, 0, sizeof g_signal_at);
  for (i = 0; i < 2; i++) {
    hk_callback cb;
    memset(&cb, 0, sizeof cb);
    cb.name = names[i];
    cb.user = (void *)names[i];
    cb.on_run_start = cb.on_run_end = cb.on_multirun_start = cb.on_multirun_end = cb.on_job_start = cb.on_job_end = life;
    assert_int_equal(hk_add_callback(reg, &cb, NULL, NULL), HK_OK);
  }
  return reg;
}

static void test_sweep_lifecycle(void **state) {
  const char *argv[] = { "optim.lr=0.1,0.2", "batch=2" };
  tr_sweep_desc d;
  tr_sweep_result res;
  hk_registry *reg = life_reg();
  (void)state;
  reset();
  fresh_dir("life");
  d = base_desc();
  d.reg = reg;
  g_fail_lr = 0.2;
  assert_int_equal(sweep(&d, &res, 2, argv), TR_ERR_MODEL);
  assert_string_equal(g_log,
    "multirun_start:a multirun_start:b "
    "job_start:a#0 job_start:b#0 job_end:b#0(ok,0.2,) job_end:a#0(ok,0.2,) "
    "job_start:a#1 job_start:b#1 job_end:b#1(model or data error,0.4,lr 0.2 diverged) "
    "job_end:a#1(model or data error,0.4,lr 0.2 diverged) multirun_end:b multirun_end:a");
  assert_int_equal(res.ok, 1);
  assert_int_equal(res.failed, 1);
  assert_non_null(strstr(res.error, "job 1 (optim.lr=0.2 batch=2) failed: lr 0.2 diverged"));
  /* one job, no -m: a plain run in the run's own directory */
  reset();
  g_log[0] = 0;
  d = base_desc();
  d.reg = reg;
  assert_int_equal(sweep(&d, &res, 1, argv + 1), TR_OK);
  assert_string_equal(g_log, "run_start:a run_start:b job_start:a#0 job_start:b#0 job_end:b#0(ok,1,) "
                             "job_end:a#0(ok,1,) run_end:b run_end:a");
  assert_int_equal(res.multirun, 0);
  assert_string_equal(res.dir, "");
  {
    char path[1024];
    snprintf(path, sizeof path, "%s/lightning_logs/version_0/overrides.yaml", g_dir);
    assert_true(exists(path));
  }
  /* -m: a sweep of one */
  reset();
  g_log[0] = 0;
  d = base_desc();
  d.reg = reg;
  {
    const char *args[] = { "-m" };
    assert_int_equal(sweep(&d, &res, 1, args), TR_OK);
  }
  assert_string_equal(g_log, "multirun_start:a multirun_start:b job_start:a#0 job_start:b#0 job_end:b#0(ok,3.5,) "
                             "job_end:a#0(ok,3.5,) multirun_end:b multirun_end:a");
  assert_int_equal(res.multirun, 1);
  hk_destroy(reg);
}

static void test_sweep_failing_job(void **state) {
  const char *argv[] = { "optim.lr=0.1,0.2,0.3" };
  tr_sweep_desc d;
  tr_sweep_result res;
  char path[1024], *text;
  (void)state;
  reset();
  fresh_dir("fail");
  d = base_desc();
  g_fail_lr = 0.2;
  assert_int_equal(sweep(&d, &res, 1, argv), TR_ERR_MODEL);
  assert_int_equal(g_jobs_run, 3); /* the sweep went on */
  assert_int_equal(res.ok, 2);
  assert_int_equal(res.failed, 1);
  snprintf(path, sizeof path, "%s/summary.csv", res.dir);
  assert_non_null(text = slurp(path));
  assert_non_null(strstr(text, "\n1,failed,0.2,,0.46666666666666673,1.4000000000000001,lr 0.2 diverged\n")); /* logged metrics, no score */
  assert_non_null(strstr(text, "\n2,ok,0.3,37,0.7000000000000001,2.1,\n"));
  free(text);
  /* stop_on_failure: the rest are skipped */
  reset();
  d = base_desc();
  d.stop_on_failure = 1;
  g_fail_lr = 0.2;
  assert_int_equal(sweep(&d, &res, 1, argv), TR_ERR_MODEL);
  assert_int_equal(g_jobs_run, 2);
  assert_int_equal(res.skipped, 1);
  snprintf(path, sizeof path, "%s/summary.csv", res.dir);
  assert_non_null(text = slurp(path));
  assert_non_null(strstr(text, "\n2,skipped,0.3,,,,\n"));
  free(text);
}

static void test_sweep_bad_overrides(void **state) {
  static const struct { const char *arg, *want; } bad[] = {
    { "foo=1", "unknown key 'foo': not a field of the program (fields: optim.lr, batch, name, flag)" },
    { "batch=1,x", "bad value 'x' for 'batch': expected an integer (int)" },
    { "batch=3000000000", "bad value '3000000000' for 'batch'" },
    { "optim.lr=1e400", "bad value '1e400' for 'optim.lr': expected a number (double)" },
    { "optim.lr=nan", "bad value 'nan' for 'optim.lr'" },
    { "flag=maybe", "bad value 'maybe' for 'flag': expected true or false" },
    { "batch=", "'batch=' has an empty list" },
    { "batch=1,,2", "'batch=1,,2' has an empty value" },
    { "early_stopping.patiense=2", "bad override 'early_stopping.patiense=2': spec error at 1:" },
    { "early_stopping.patience=1,x", "bad override 'early_stopping.patience=x': spec error at 1:" },
    { "model_checkpoint.monitor=a", "unknown key 'model_checkpoint.monitor'" },
    { "batch", "argument 'batch' is not an override: expected key=value" },
    { "=3", "argument '=3' is not an override" },
  };
  const char *twice[] = { "batch=1", "optim.lr=2", "batch=3" };
  tr_sweep_desc d;
  tr_sweep_result res;
  size_t i;
  (void)state;
  fresh_dir("bad");
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *argv[2];
    argv[0] = "name=p,q";
    argv[1] = bad[i].arg;
    reset();
    d = base_desc();
    assert_int_equal(sweep(&d, &res, 2, argv), TR_ERR_INVALID);
    if (!strstr(res.error, bad[i].want)) fail_msg("%s: \"%s\" lacks \"%s\"", bad[i].arg, res.error, bad[i].want);
    assert_int_equal(g_jobs_run, 0);
    assert_int_equal(res.jobs, 0);
  }
  assert_non_null(strstr(res.error, "is not an override"));
  reset();
  d = base_desc();
  assert_int_equal(sweep(&d, &res, 3, twice), TR_ERR_INVALID);
  assert_non_null(strstr(res.error, "key 'batch' is given twice"));
  assert_false(exists(g_dir)); /* nothing was made */
}

/* Values that would fail every job, or the summary, after the sweep started (issue 28 item 5): refused
   before the first job, saying why, nothing made on disk. */
static float g_wd = 0.5f;
static void test_sweep_values_checked(void **state) {
  char long_name[300], long_arg[320], long_field[80];
  static const tr_sweep_field floats[] = { { "wd", TR_SWEEP_FLOAT, &g_wd }, { "optim.lr", TR_SWEEP_DOUBLE, &g_lr } };
  struct { const char *arg, *want; int floats; } bad[] = {
    { "name=a\nb", "bad value 'a\\x0ab' for 'name': it holds a control character (a line break, a tab ...)", 0 },
    { "name=x,tab\there", "bad value 'tab\\x09here' for 'name': it holds a control character", 0 },
    { "name=caf\xe9", "bad value 'caf\\xe9' for 'name': it is not valid UTF-8", 0 },
    { long_arg, "for 'name': it is longer than 255 bytes, the most a hyperparameter holds", 0 },
    { "optim.lr=0x10", "bad value '0x10' for 'optim.lr': expected a number (double); hexadecimal is not taken", 0 },
    { "optim.lr=-0X1p-3", "hexadecimal is not taken: write it in decimal", 0 },
    { "optim.lr=1e-400", "bad value '1e-400' for 'optim.lr': expected a number (double); it underflows a double", 0 },
    { "optim.lr=1e-310", "it underflows a double", 0 },
    { "wd=1e-40", "bad value '1e-40' for 'wd': expected a number (float); it underflows a float", 1 },
    { "early_stopping.monitor=val/\xff", "bad value 'val/\\xff' for 'early_stopping.monitor': it is not valid UTF-8", 0 },
    { "early_stopping.monitor=a\r", "it holds a control character", 0 },
  };
  tr_sweep_desc d;
  tr_sweep_result res;
  tr_sweep_field lf[1];
  const char *ok[] = { "wd=0,1e-30,-2.5", "optim.lr=1e-300" };
  size_t i;
  (void)state;
  memset(long_name, 'n', sizeof long_name - 1);
  long_name[256] = 0; /* 256 bytes: one too many */
  snprintf(long_arg, sizeof long_arg, "name=%s", long_name);
  fresh_dir("values");
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *argv[1];
    argv[0] = bad[i].arg;
    reset();
    d = base_desc();
    if (bad[i].floats) { d.fields = floats; d.n_fields = 2; }
    assert_int_equal(sweep(&d, &res, 1, argv), TR_ERR_INVALID);
    if (!strstr(res.error, bad[i].want)) fail_msg("%s: \"%s\" lacks \"%s\"", bad[i].arg, res.error, bad[i].want);
    assert_int_equal(g_jobs_run, 0);
  }
  long_name[255] = 0; /* 255: taken */
  {
    const char *argv[] = { long_arg };
    snprintf(long_arg, sizeof long_arg, "name=%s", long_name);
    reset();
    d = base_desc();
    assert_int_equal(sweep(&d, &res, 1, argv), TR_OK);
    assert_int_equal(g_jobs_run, 1);
  }
  /* a field whose name cannot be a hyperparameter's key */
  memset(long_field, 'f', 64);
  long_field[64] = 0;
  lf[0].name = long_field;
  lf[0].type = TR_SWEEP_INT;
  lf[0].ptr = &g_batch;
  reset();
  d = base_desc();
  d.fields = lf;
  d.n_fields = 1;
  assert_int_equal(sweep(&d, &res, 0, NULL), TR_ERR_INVALID);
  assert_non_null(strstr(res.error, "field 0's name 'ffff"));
  assert_non_null(strstr(res.error, "is longer than 63 bytes"));
  assert_int_equal(g_jobs_run, 0);
  /* numbers that are fine: 0, a float's small normal, a double's small normal */
  reset();
  d = base_desc();
  d.fields = floats;
  d.n_fields = 2;
  d.spec = "csv";
  assert_int_equal(sweep(&d, &res, 2, ok), TR_OK);
  assert_int_equal(res.ok, 3);
  reset();
  fresh_dir("values_nothing");
  d = base_desc();
  {
    const char *argv[] = { "name=a\nb" };
    assert_int_equal(sweep(&d, &res, 1, argv), TR_ERR_INVALID);
  }
  assert_false(exists(g_dir)); /* nothing was made */
}

/* The summary: written after every job for the jobs done, so a process that dies in a job leaves the
   rows of those before it; a job's error with a line break or stray bytes stays one cell of one row,
   and summary.svg is written (issue 28 item 5). */
static void test_sweep_summary_what_ran(void **state) {
  const char *argv[] = { "optim.lr=0.1,0.2,0.3,0.4" };
  tr_sweep_desc d;
  tr_sweep_result res;
  char path[1024], *text;
  pid_t pid;
  int status;
  (void)state;
  reset();
  fresh_dir("died");
  d = base_desc();
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    g_die_at = 2;
    (void)sweep(&d, &res, 1, argv);
    _exit(0); /* not reached */
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  if (d.log) fclose(d.log);
  snprintf(path, sizeof path, "%s/version_0/summary.csv", g_dir);
  assert_non_null(text = slurp(path));
  assert_non_null(strstr(text, "job,status,optim.lr,score,train/loss,val/loss,error\n0,ok,0.1,"));
  assert_non_null(strstr(text, "\n1,ok,0.2,27,"));
  assert_null(strstr(text, "\n2,"));
  free(text);

  reset();
  fresh_dir("error_lines");
  d = base_desc();
  g_fail_lr = 0.2;
  g_fail_text = "diverged\nat step 3:\tloss \xff";
  assert_int_equal(sweep(&d, &res, 1, argv), TR_ERR_MODEL); /* the job's error, not the summary's */
  assert_int_equal(res.ok, 3);
  snprintf(path, sizeof path, "%s/summary.csv", res.dir);
  assert_non_null(text = slurp(path));
  assert_non_null(strstr(text, "\n1,failed,0.2,,"));
  assert_non_null(strstr(text, ",diverged at step 3: loss \xef\xbf\xbd\n2,ok,"));
  free(text);
  snprintf(path, sizeof path, "%s/summary.svg", res.dir);
  assert_true(exists(path));
}

static void test_sweep_spec_params(void **state) {
  const char *argv[] = { "early_stopping.patience=1,7", "csv.flush_every=2", "plot.metrics=val/loss train/loss" };
  tr_sweep_desc d;
  tr_sweep_result res;
  (void)state;
  reset();
  fresh_dir("spec");
  d = base_desc();
  d.spec = "early_stopping(monitor=val/loss, patience = 3, check_on_train_epoch_end=false); csv; plot(title=\"a, b\")";
  assert_int_equal(sweep(&d, &res, 3, argv), TR_OK);
  assert_int_equal(res.jobs, 2);
  assert_string_equal(g_specs[0], "early_stopping(monitor=val/loss, patience=1, check_on_train_epoch_end=false); "
                                  "csv(flush_every=2); plot(title=\"a, b\", metrics=\"val/loss train/loss\")");
  assert_string_equal(g_specs[1], "early_stopping(monitor=val/loss, patience=7, check_on_train_epoch_end=false); "
                                  "csv(flush_every=2); plot(title=\"a, b\", metrics=\"val/loss train/loss\")");
}

static hk_signal signal_at(hk_ctx *ctx, void *user) {
  const tr_sweep_job *j = tr_sweep_current(ctx);
  (void)user;
  if (ctx->event == HK_ON_JOB_END && j->index == 1) return HK_STOP;
  if (ctx->event == HK_ON_JOB_START && j->index == 0) return HK_FAIL;
  return HK_CONTINUE;
}
static hk_signal fail_fn(hk_ctx *ctx, void *user) { (void)ctx; (void)user; return HK_FAIL; }

static void test_sweep_hook_signals(void **state) {
  const char *argv[] = { "batch=1,2,3,4" };
  tr_sweep_desc d;
  tr_sweep_result res;
  hk_registry *reg = hk_create(NULL);
  (void)state;
  reset();
  fresh_dir("signals");
  assert_int_equal(hk_on(reg, HK_ON_JOB_START, signal_at, NULL, &(hk_opts){ .name = "s" }, NULL), HK_OK);
  assert_int_equal(hk_on(reg, HK_ON_JOB_END, signal_at, NULL, &(hk_opts){ .name = "e" }, NULL), HK_OK);
  d = base_desc();
  d.reg = reg;
  assert_int_equal(sweep(&d, &res, 1, argv), TR_ERR_HOOK);
  assert_string_equal(g_seen, "0.5/2/base/0"); /* job 0 failed unrun, job 1 ran and stopped the sweep */
  assert_int_equal(res.failed, 1);
  assert_int_equal(res.ok, 1);
  assert_int_equal(res.skipped, 2);
  assert_non_null(strstr(res.error, "job 0 (batch=1) failed: hook 's' failed in on_job_start"));
  hk_destroy(reg);
  /* a failing on_multirun_start: no job */
  reg = hk_create(NULL);
  assert_int_equal(hk_on(reg, HK_ON_MULTIRUN_START, fail_fn, NULL, &(hk_opts){ .name = "no" }, NULL), HK_OK);
  reset();
  d = base_desc();
  d.reg = reg;
  assert_int_equal(sweep(&d, &res, 1, argv), TR_ERR_HOOK);
  assert_int_equal(g_jobs_run, 0);
  assert_non_null(strstr(res.error, "hook 'no' failed in on_multirun_start"));
  hk_destroy(reg);
}

/* Hydra registers its callbacks from config: a factory of the program's, applied as a spec string on
   the sweep's registry, gets the lifecycle events like any hook. */
static int g_from_spec;
static hk_signal count_job(hk_ctx *ctx, void *user) {
  (void)user;
  if (tr_sweep_current(ctx)->status == TR_OK) g_from_spec++;
  return HK_CONTINUE;
}
static hk_err job_counter_make(hk_registry *reg, const hk_args *a, void *user) {
  hk_opts o = { .name = hk_arg_str(a, "name") };
  (void)user;
  return hk_on(reg, HK_ON_JOB_END, count_job, NULL, &o, NULL);
}
static void test_sweep_hooks_from_spec(void **state) {
  static const hk_param params[] = { { "name", HK_PARAM_STRING, "job_counter", NULL, "the hook's name" } };
  const char *argv[] = { "batch=1,2,3" };
  tr_sweep_desc d;
  tr_sweep_result res;
  hk_registry *reg = hk_create(NULL);
  (void)state;
  reset();
  fresh_dir("from_spec");
  g_from_spec = 0;
  assert_int_equal(hk_factory_add(reg, "job_counter", params, 1, job_counter_make, NULL, "counts jobs that ended well"), HK_OK);
  assert_int_equal(hk_spec_apply(reg, "job_counter(name=c1); job_counter(name=c2)"), HK_OK);
  d = base_desc();
  d.reg = reg;
  assert_int_equal(sweep(&d, &res, 1, argv), TR_OK);
  assert_int_equal(g_from_spec, 6); /* 3 jobs, 2 hooks */
  hk_destroy(reg);
}

/* A symlink planted where the summary goes is not followed nor replaced: the sweep says so (TR_ERR_IO)
   after running every job. */
static char g_target[600];
static hk_signal plant_link(hk_ctx *ctx, void *user) {
  const tr_sweep_job *j = tr_sweep_current(ctx);
  char link[1100], dir[1024], *slash;
  (void)user;
  snprintf(dir, sizeof dir, "%s", j->dir);
  if ((slash = strrchr(dir, '/')) != NULL) *slash = 0; /* the sweep's directory */
  snprintf(link, sizeof link, "%s/summary.csv", dir);
  if (j->index == 0 && symlink(g_target, link) != 0) return HK_FAIL;
  return HK_CONTINUE;
}
static void test_sweep_summary_symlink(void **state) {
  const char *argv[] = { "batch=1,2" };
  tr_sweep_desc d;
  tr_sweep_result res;
  hk_registry *reg = hk_create(NULL);
  FILE *f;
  char *text;
  (void)state;
  reset();
  fresh_dir("symlink");
  snprintf(g_target, sizeof g_target, "%s/victim.txt", g_root);
  assert_non_null(f = fopen(g_target, "w"));
  fputs("mine\n", f);
  fclose(f);
  assert_int_equal(hk_on(reg, HK_ON_JOB_END, plant_link, NULL, &(hk_opts){ .name = "plant" }, NULL), HK_OK);
  d = base_desc();
  d.reg = reg;
  assert_int_equal(sweep(&d, &res, 1, argv), TR_ERR_IO);
  assert_int_equal(res.ok, 2);
  assert_non_null(strstr(res.error, "summary.csv is not a regular file"));
  assert_non_null(text = slurp(g_target));
  assert_string_equal(text, "mine\n");
  free(text);
  hk_destroy(reg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_sweep_product_dirs_summary),
    cmocka_unit_test(test_sweep_lifecycle),
    cmocka_unit_test(test_sweep_failing_job),
    cmocka_unit_test(test_sweep_bad_overrides),
    cmocka_unit_test(test_sweep_values_checked),
    cmocka_unit_test(test_sweep_summary_what_ran),
    cmocka_unit_test(test_sweep_spec_params),
    cmocka_unit_test(test_sweep_hook_signals),
    cmocka_unit_test(test_sweep_hooks_from_spec),
    cmocka_unit_test(test_sweep_summary_symlink),
  };
  return run_tests_in_dir(tests, "test_sweep", g_root); /* KEEP=1: the directory stays */
}
