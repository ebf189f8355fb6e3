/* tests/own_run_cluster.h - train/cluster.h's tests, part of tests/test_own_run.c (make test-own-run: plain,
   ASan+UBSan, valgrind; it gives g_root, a scratch directory): Slurm's environment read (tr_slurm_read: a batch
   shell, an srun task, an mpirun rank, malformed values), the preemption settings refused with a message that
   names the field (tr_preempt_check, tr_run_setup, tr_fit), and a loop of its own through the run layer: the
   preemption signal saves the step and asks a (fake) scontrol to requeue the job, a requeued job resumes from
   save_to by itself, a program's own handler is left alone, and tr_run_desc.agree (what another rank says)
   stops, fails or preempts this rank at the same step. Under a real cluster, with tr_fit too: tests/slurm/run.sh. */
#include "../examples/mlp.h"

static char dir[300];
static char saved_path[4096];

static void clear_slurm(void) {
  static const char *const vars[] = { "SLURM_JOB_ID", "SLURM_RESTART_COUNT", "SLURM_PROCID", "SLURM_NTASKS",
                                      "SLURM_STEP_ID", "OMPI_COMM_WORLD_RANK" };
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}
/* The cluster tests' scratch directory and environment: made before each, undone after. */
static int cluster_setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "%s/cluster", g_root);
  snprintf(saved_path, sizeof saved_path, "%s", getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
  clear_slurm();
  return mkdir(dir, 0700) && access(dir, F_OK) ? -1 : 0;
}
static int cluster_teardown(void **state) {
  (void)state;
  clear_slurm();
  setenv("PATH", saved_path, 1);
  return 0;
}

static void test_slurm_env(void **state) {
  tr_slurm s;
  (void)state;
  clear_slurm();
  assert_int_equal(tr_slurm_read(&s), 0); /* outside Slurm */
  assert_int_equal(s.on, 0);
  assert_int_equal(s.world, 1);
  setenv("SLURM_JOB_ID", "4242", 1); /* a batch shell: no step, so no task rank */
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "2", 1);
  assert_int_equal(tr_slurm_read(&s), 1);
  assert_string_equal(s.job_id, "4242");
  assert_int_equal(s.restart_count, 0);
  assert_int_equal(s.srun, 0);
  assert_int_equal(s.world, 1);
  setenv("SLURM_RESTART_COUNT", "3", 1);
  setenv("SLURM_STEP_ID", "0", 1); /* a task of srun -n 2 */
  setenv("SLURM_PROCID", "1", 1);
  assert_int_equal(tr_slurm_read(&s), 1);
  assert_int_equal(s.restart_count, 3);
  assert_int_equal(s.srun, 1);
  assert_int_equal(s.rank, 1);
  assert_int_equal(s.world, 2);
  setenv("OMPI_COMM_WORLD_RANK", "1", 1); /* a rank of mpirun inside a step: SLURM_PROCID is not its rank */
  assert_int_equal(tr_slurm_read(&s), 1);
  assert_int_equal(s.srun, 0);
  assert_int_equal(s.rank, 0);
  unsetenv("OMPI_COMM_WORLD_RANK");
  setenv("SLURM_PROCID", "2", 1); /* malformed: the rank is not below the count */
  assert_int_equal(tr_slurm_read(&s), -1);
  assert_non_null(strstr(s.why, "SLURM_PROCID '2' and SLURM_NTASKS '2'"));
  assert_int_equal(s.on, 1);
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_RESTART_COUNT", "-1", 1);
  assert_int_equal(tr_slurm_read(&s), -1);
  assert_non_null(strstr(s.why, "SLURM_RESTART_COUNT is '-1'"));
  setenv("SLURM_JOB_ID", "12; rm -rf /", 1); /* never handed to a shell */
  assert_int_equal(tr_slurm_read(&s), -1);
  assert_int_equal(s.on, 0);
  assert_non_null(strstr(s.why, "SLURM_JOB_ID is '12; rm -rf /': not a job id"));
  clear_slurm();
}

/* A fake scontrol in DIR/NAME (made): a shell script of body; its folder goes in bin. */
static void fake_scontrol(char *bin, size_t cap, const char *name, const char *body) {
  char script[600];
  FILE *f;
  snprintf(bin, cap, "%s/%s", dir, name);
  assert_true(mkdir(bin, 0700) == 0 || access(bin, F_OK) == 0);
  snprintf(script, sizeof script, "%s/scontrol", bin);
  assert_non_null(f = fopen(script, "w"));
  fprintf(f, "#!/bin/sh\n%s\n", body);
  fclose(f);
  assert_int_equal(chmod(script, 0700), 0);
}
static void check_refused(const tr_preempt *p, const char *save_to, const char *says) {
  char why[512] = "";
  assert_int_equal(tr_preempt_check(p, save_to, "x.", why, sizeof why), TR_ERR_INVALID);
  if (!strstr(why, says)) fail_msg("'%s' does not say '%s'", why, says);
}
static void test_preempt_settings(void **state) {
  char why[512];
  (void)state;
  assert_int_equal(tr_preempt_check(&(tr_preempt){ 0 }, NULL, "x.", why, sizeof why), TR_OK);
  assert_int_equal(tr_preempt_check(&(tr_preempt){ .signal = SIGUSR2, .requeue = TR_YES }, "c", "x.", why, sizeof why), TR_OK);
  assert_int_equal(tr_preempt_check(&(tr_preempt){ .signal = TR_NO }, NULL, "x.", why, sizeof why), TR_OK);
  check_refused(&(tr_preempt){ .signal = 99 }, NULL, "x.preempt.signal is 99: give a signal's number (1 .. 64");
  check_refused(&(tr_preempt){ .signal = -5 }, NULL, "x.preempt.signal is -5");
  check_refused(&(tr_preempt){ .signal = SIGKILL }, NULL, "(SIGKILL): it cannot be caught; give another (SIGUSR1 or SIGUSR2");
  check_refused(&(tr_preempt){ .signal = SIGTERM }, NULL, "(SIGTERM): it stops the run already");
  check_refused(&(tr_preempt){ .signal = SIGCONT }, NULL, "(SIGCONT): Slurm sends it to every job it ends or requeues");
  check_refused(&(tr_preempt){ .signal = SIGSEGV }, NULL, "(SIGSEGV): it reports a fault");
  check_refused(&(tr_preempt){ .requeue = 2 }, NULL, "x.preempt.requeue is 2: give TR_YES, TR_NO or 0");
  check_refused(&(tr_preempt){ .resume = 7 }, NULL, "x.preempt.resume is 7");
  check_refused(&(tr_preempt){ .requeue = TR_YES }, NULL, "x.preempt.requeue is TR_YES but save_to is not set");
  check_refused(&(tr_preempt){ .requeue = TR_YES }, "", "but save_to is not set");
  check_refused(&(tr_preempt){ .requeue = TR_YES, .signal = TR_NO }, "c", "but preempt.signal is TR_NO");
  /* where a loop gives them: tr_run_setup refuses, naming the field */
  hk_registry *reg = hk_create(NULL);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .preempt = { .signal = SIGSTOP } }), TR_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(reg), "tr_run_setup: tr_run_desc.preempt.signal is "));
  assert_non_null(strstr(hk_last_error(reg), "(SIGSTOP): it cannot be caught"));
  hk_destroy(reg);
}

static void test_fit_refuses(void **state) {
  spirals data;
  mlp net;
  tr_tensor views[MLP_NUM_TENSORS];
  tr_trainer t;
  (void)state;
  assert_int_equal(spirals_make(&data, 16, 3, 0.2f, 1), 0);
  assert_int_equal(mlp_init(&net, 2, 8, 3, 8, 42), 0);
  tr_data train = spirals_tr_data(&data, 8, 1);
  assert_int_equal(tr_init(&t, &(tr_desc){ .model = mlp_tr_model(&net, views) }), TR_OK);
  assert_int_equal(tr_fit(&t, &(tr_config){ .train = &train, .max_steps = 2, .preempt = { .requeue = TR_YES } }), TR_ERR_INVALID);
  if (!strstr(tr_error(&t), "tr_fit: config.preempt.requeue is TR_YES but save_to is not set")) fail_msg("%s", tr_error(&t));
  assert_int_equal(t.global_step, 0);
  tr_free(&t);
  mlp_free(&net);
  spirals_free(&data);
}

/* ---- a loop of its own: one weight, a step adds 1; the run layer saves it ---- */
static float wt;
static int save_model(void *u, FILE *f) { (void)u; return fwrite(&wt, sizeof wt, 1, f) != 1; }
static int load_model(void *u, FILE *f) { (void)u; return fread(&wt, sizeof wt, 1, f) != 1; }
static int64_t others; /* what the other ranks say (tr_run_desc.agree), from step `others_at` on */
static int64_t others_at;
static int agreed_calls;
static int64_t start_or[4]; /* OR'ed into the start's votes 1-3 (its failures, the resumed state's hash, the verdict) */
static const char *resume_path; /* own_run's tr_run_start resumes it (NULL: a fresh start) */
static int steps_run;    /* the steps own_run's loop took (a resume takes fewer) */
static FILE *run_log;    /* own_run's tr_run_desc.log (NULL: stderr) */
static int64_t agree(void *u, int64_t stops) {
  hk_ctx *ctx = (hk_ctx *)u;
  agreed_calls++;
  return stops | (ctx->global_step >= others_at ? others : 0) | (agreed_calls <= 3 ? start_or[agreed_calls] : 0);
}
/* steps to n; raise sig after step `at` (0: none). Returns the run's outcome; *step where it ended. */
static tr_err own_run(const char *ckpt, int64_t n, int at, int sig, int use_agree, int64_t *step, char *err, size_t cap) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  tr_err e;
  memset(&ctx, 0, sizeof ctx);
  wt = 0;
  e = tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = n, .log_every_n_steps = -1, .save_model = save_model,
                                        .load_model = load_model, .model_user = &ctx, .save_to = ckpt,
                                        .preempt = { .requeue = TR_YES }, .agree = use_agree ? agree : NULL, .log = run_log });
  assert_int_equal(e, TR_OK);
  unsigned next = tr_run_start(reg, &ctx, resume_path) ? TR_RUN_STOP : 0;
  steps_run = 0;
  while (!(next & TR_RUN_STOP) && ctx.global_step < n) {
    steps_run++;
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, &ctx, &flow);
    wt += 1;
    ctx.global_step++;
    if (ctx.global_step == at) raise(sig);
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);
    next = tr_run_batch_end(reg, &ctx, &flow);
  }
  e = tr_run_finish(reg, &ctx, TR_OK);
  *step = ctx.global_step;
  snprintf(err, cap, "%s", tr_run_error(reg));
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  return e;
}

static void test_preempt_own_loop(void **state) {
  char ckpt[400], bin[400], log[400], body[500], err[1024], got[200] = "";
  int64_t step;
  FILE *f;
  (void)state;
  clear_slurm();
  snprintf(ckpt, sizeof ckpt, "%s/c.ckpt", dir);
  /* outside Slurm: saved, stopped, nothing to requeue */
  assert_int_equal(own_run(ckpt, 10, 4, SIGUSR1, 0, &step, err, sizeof err), TR_ERR_INTERRUPTED);
  assert_int_equal(step, 4);
  assert_non_null(strstr(err, "preempted (SIGUSR1): stopped after step 4; its state saved to "));
  assert_non_null(strstr(err, "; not requeued: not in a Slurm job (SLURM_JOB_ID)"));
  assert_int_equal(tr_preempt_requested(), 1);
  assert_true(access(ckpt, F_OK) == 0);
  /* in a Slurm job: a fake scontrol in PATH says what it was asked */
  snprintf(log, sizeof log, "%s/scontrol.log", dir);
  snprintf(body, sizeof body, "echo \"$@\" > %s", log);
  fake_scontrol(bin, sizeof bin, "bin", body);
  char path[8192];
  snprintf(path, sizeof path, "%s:%s", bin, saved_path);
  setenv("PATH", path, 1);
  setenv("SLURM_JOB_ID", "77", 1);
  assert_int_equal(own_run(ckpt, 10, 6, SIGUSR1, 0, &step, err, sizeof err), TR_ERR_INTERRUPTED);
  assert_int_equal(step, 6);
  assert_non_null(strstr(err, "; job 77 requeued"));
  assert_non_null(f = fopen(log, "r"));
  assert_non_null(fgets(got, sizeof got, f));
  fclose(f);
  assert_string_equal(got, "requeue 77\n");
  /* the requeued job (SLURM_RESTART_COUNT 1) resumes from save_to by itself and ends at 10: wt is 10 */
  setenv("SLURM_RESTART_COUNT", "1", 1);
  assert_int_equal(own_run(ckpt, 10, 0, 0, 0, &step, err, sizeof err), TR_OK);
  assert_int_equal(step, 10);
  assert_true(wt == 10.0f);
  clear_slurm();
  /* not a restart: it starts from 0 (the file stays as it was) */
  assert_int_equal(own_run(ckpt, 3, 0, 0, 0, &step, err, sizeof err), TR_OK);
  assert_true(wt == 3.0f);
}

/* Issue 37, item 14: no scontrol on PATH is said as such (it was "was it submitted with --requeue?"); a
   failing scontrol's status is said; an empty SLURM_JOB_ID is no Slurm job (a second SIGTERM only counted). */
static void test_requeue_messages(void **state) {
  char ckpt[400], bin[400], err[1024];
  int64_t step;
  (void)state;
  clear_slurm();
  snprintf(ckpt, sizeof ckpt, "%s/r.ckpt", dir);
  snprintf(bin, sizeof bin, "%s/empty_bin", dir);
  assert_true(mkdir(bin, 0700) == 0 || access(bin, F_OK) == 0);
  setenv("PATH", bin, 1); /* system() runs /bin/sh by its path: only scontrol is missing */
  setenv("SLURM_JOB_ID", "78", 1);
  assert_int_equal(own_run(ckpt, 10, 3, SIGUSR1, 0, &step, err, sizeof err), TR_ERR_INTERRUPTED);
  if (!strstr(err, "; job 78 is not requeued: scontrol is not on PATH") || strstr(err, "--requeue")) fail_msg("%s", err);
  fake_scontrol(bin, sizeof bin, "failing_bin", "exit 3");
  setenv("PATH", bin, 1);
  assert_int_equal(own_run(ckpt, 10, 3, SIGUSR1, 0, &step, err, sizeof err), TR_ERR_INTERRUPTED);
  if (!strstr(err, "; requeueing job 78 failed (scontrol requeue 78 exited with status 3: was the job submitted with --requeue")) fail_msg("%s", err);
  setenv("PATH", saved_path, 1);
  setenv("SLURM_JOB_ID", "", 1);
  assert_int_equal(tr__slurm_job(), 0); /* the stop signals' second SIGTERM ends the run, as outside Slurm */
  setenv("SLURM_JOB_ID", "78", 1);
  assert_int_equal(tr__slurm_job(), 1);
  clear_slurm();
}

static void on_usr1(int sig) { signal(sig, on_usr1); } /* (System V-style signal() resets it) */
static void test_own_handler_left_alone(void **state) {
  char ckpt[400], err[1024];
  int64_t step;
  void (*prev)(int) = signal(SIGUSR1, on_usr1);
  (void)state;
  snprintf(ckpt, sizeof ckpt, "%s/h.ckpt", dir);
  assert_int_equal(own_run(ckpt, 5, 2, SIGUSR1, 0, &step, err, sizeof err), TR_OK); /* the program's handler had it */
  assert_int_equal(step, 5);
  void (*now)(int) = signal(SIGUSR1, prev);
  if (now != on_usr1) fail_msg("SIGUSR1 handler is not the program's (SIG_DFL %d)", now == SIG_DFL);
}

static void test_agree(void **state) {
  char ckpt[400], err[1024];
  int64_t step;
  (void)state;
  snprintf(ckpt, sizeof ckpt, "%s/a.ckpt", dir);
  /* another rank was preempted at step 3: this one stops there too, saved */
  others = TR_STOP_PREEMPT, others_at = 3, agreed_calls = 0;
  assert_int_equal(own_run(ckpt, 10, 0, 0, 1, &step, err, sizeof err), TR_ERR_INTERRUPTED);
  assert_int_equal(step, 3);
  assert_int_equal(agreed_calls, 6); /* at the start three times (failures, the resumed state, its verdict), then a step */
  assert_non_null(strstr(err, "preempted (SIGUSR1): stopped after step 3; its state saved to "));
  /* another rank's SIGTERM */
  others = TR_STOP_SIGNAL, others_at = 2;
  assert_int_equal(own_run(ckpt, 10, 0, 0, 1, &step, err, sizeof err), TR_ERR_INTERRUPTED);
  assert_int_equal(step, 2);
  assert_non_null(strstr(err, "interrupted (Ctrl-C): stopped after step 2; its state saved to "));
  /* another rank failed: this one fails at the same step */
  others = TR_STOP_FAILED, others_at = 5;
  assert_int_equal(own_run(ckpt, 10, 0, 0, 1, &step, err, sizeof err), TR_ERR_COMM);
  assert_int_equal(step, 5);
  assert_non_null(strstr(err, "another rank's run failed"));
  /* another rank's start failed (its resume, say): this one's start fails too, before any step */
  others = TR_STOP_FAILED, others_at = 0, agreed_calls = 0;
  assert_int_equal(own_run(ckpt, 10, 0, 0, 1, &step, err, sizeof err), TR_ERR_COMM);
  assert_int_equal(step, 0);
  assert_int_equal(agreed_calls, 1);
  assert_non_null(strstr(err, "another rank's run failed to start"));
  /* a hook's stop on another rank: a clean stop here */
  others = TR_STOP_HOOK, others_at = 7;
  assert_int_equal(own_run(ckpt, 10, 0, 0, 1, &step, err, sizeof err), TR_OK);
  assert_int_equal(step, 7);
  others = 0;
}

/* Issue 37, item 9: ranks that resume different states (two files with the same counters, or one rank fresh)
   fail at the start, every one, before a step: the OR of the ranks' hashes differs from a rank's own. */
static void test_agree_resumed(void **state) {
  char ckpt[400], err[1024];
  int64_t step;
  (void)state;
  snprintf(ckpt, sizeof ckpt, "%s/r.ckpt", dir);
  others = TR_STOP_PREEMPT, others_at = 3; /* a checkpoint at step 3 to resume */
  assert_int_equal(own_run(ckpt, 10, 0, 0, 1, &step, err, sizeof err), TR_ERR_INTERRUPTED);
  others = 0;
  /* the same state everywhere: it goes on (the other ranks' hash OR'ed in is this rank's own) */
  resume_path = ckpt, agreed_calls = 0;
  assert_int_equal(own_run(ckpt, 10, 0, 0, 1, &step, err, sizeof err), TR_OK);
  assert_int_equal(step, 10);
  assert_int_equal(steps_run, 7);
  /* this rank starts fresh (hash 0), another resumed: the OR is not 0 */
  resume_path = NULL, agreed_calls = 0, start_or[2] = 0x5a5a;
  assert_int_equal(own_run(ckpt, 10, 0, 0, 1, &step, err, sizeof err), TR_ERR_INVALID);
  assert_int_equal(step, 0);
  assert_int_equal(agreed_calls, 3);
  assert_non_null(strstr(err, "tr_run_start: the ranks resumed different states (this rank's hash of the model's bytes and "
                              "counters it loaded: 0000000000000000; every rank's OR'ed: 0000000000005a5a"));
  /* this rank's hash was the OR (the other's bits are a subset): the other rank saw it and says so in the verdict */
  resume_path = ckpt, agreed_calls = 0, start_or[2] = 0, start_or[3] = TR_STOP_FAILED;
  assert_int_equal(own_run(ckpt, 10, 0, 0, 1, &step, err, sizeof err), TR_ERR_INVALID);
  assert_int_equal(step, 3);
  assert_int_equal(steps_run, 0);
  assert_non_null(strstr(err, "tr_run_start: another rank resumed a different state"));
  resume_path = NULL, start_or[3] = 0;
}

/* Issue 37, item 8: a requeued job resumes from save_to only when this job wrote it. Job 200 requeued finds job 100's
   file (the same script, the same save_to): it is said and not used, in a loop of its own and in tr_fit; a file
   written outside Slurm is not this job's either; the job's own file is resumed (and tr_fit's logs continue in
   its version_0). */
static char *log_text(FILE *f) {
  long n;
  char *p;
  fflush(f);
  n = ftell(f);
  p = (char *)calloc((size_t)n + 1, 1);
  rewind(f);
  if (fread(p, 1, (size_t)n, f) != (size_t)n) p[0] = 0;
  fseek(f, 0, SEEK_END);
  return p;
}
static tr_err fit_job(const char *ckpt, const char *logs, int64_t steps, int save, FILE *log, int64_t *step) {
  spirals data;
  mlp net;
  tr_tensor views[MLP_NUM_TENSORS];
  tr_trainer t;
  char spec[600];
  tr_err e;
  assert_int_equal(spirals_make(&data, 16, 3, 0.2f, 1), 0);
  assert_int_equal(mlp_init(&net, 2, 8, 3, 8, 42), 0);
  tr_data train = spirals_tr_data(&data, 8, 1);
  assert_int_equal(tr_init(&t, &(tr_desc){ .model = mlp_tr_model(&net, views), .log = log }), TR_OK);
  snprintf(spec, sizeof spec, "csv(save_dir=%s)", logs);
  assert_int_equal(hk_spec_apply(t.reg, spec), HK_OK);
  e = tr_fit(&t, &(tr_config){ .train = &train, .max_steps = steps, .save_to = ckpt, .no_sigint = 1 });
  if (!e && save) e = tr_save(&t, ckpt);
  *step = t.global_step;
  tr_free(&t);
  mlp_free(&net);
  spirals_free(&data);
  return e;
}
static void test_requeue_own_job_only(void **state) {
  char ckpt[400], logs[400], v[500], bin[400], path[8192], err[1024], *text;
  int64_t step;
  FILE *f;
  (void)state;
  clear_slurm();
  fake_scontrol(bin, sizeof bin, "bin_own", "exit 0"); /* a fake scontrol that says nothing */
  snprintf(path, sizeof path, "%s:%s", bin, saved_path);
  setenv("PATH", path, 1);
  assert_non_null(run_log = tmpfile());
  snprintf(ckpt, sizeof ckpt, "%s/own.ckpt", dir);
  setenv("SLURM_JOB_ID", "100", 1); /* job 100 preempted at step 4: its save_to */
  assert_int_equal(own_run(ckpt, 10, 4, SIGUSR1, 0, &step, err, sizeof err), TR_ERR_INTERRUPTED);
  setenv("SLURM_JOB_ID", "200", 1); /* job 200, requeued before it saved: not job 100's run */
  setenv("SLURM_RESTART_COUNT", "1", 1);
  assert_int_equal(own_run(ckpt, 10, 0, 0, 0, &step, err, sizeof err), TR_OK);
  assert_int_equal(steps_run, 10);
  text = log_text(run_log);
  if (!strstr(text, "was written by Slurm job 100") || !strstr(text, "not by this job (200): it is not resumed") || strstr(text, "resuming from"))
    fail_msg("%s", text);
  free(text);
  unsetenv("SLURM_RESTART_COUNT"); /* job 200 preempted at step 3, requeued: its own file */
  assert_int_equal(own_run(ckpt, 10, 3, SIGUSR1, 0, &step, err, sizeof err), TR_ERR_INTERRUPTED);
  setenv("SLURM_RESTART_COUNT", "1", 1);
  assert_int_equal(own_run(ckpt, 10, 0, 0, 0, &step, err, sizeof err), TR_OK);
  assert_int_equal(steps_run, 7);
  clear_slurm(); /* a file written outside Slurm is no requeued job's own */
  assert_int_equal(own_run(ckpt, 10, 2, SIGUSR1, 0, &step, err, sizeof err), TR_ERR_INTERRUPTED);
  setenv("SLURM_JOB_ID", "300", 1);
  setenv("SLURM_RESTART_COUNT", "1", 1);
  fclose(run_log);
  assert_non_null(run_log = tmpfile());
  assert_int_equal(own_run(ckpt, 10, 0, 0, 0, &step, err, sizeof err), TR_OK);
  assert_int_equal(steps_run, 10);
  text = log_text(run_log);
  if (!strstr(text, "was written by a run outside Slurm, not by this job (300)")) fail_msg("%s", text);
  free(text);
  fclose(run_log);
  run_log = NULL;
  /* tr_fit: job 100 saved at step 2; job 200 requeued starts from 0; job 100 requeued resumes, in its version_0 */
  snprintf(ckpt, sizeof ckpt, "%s/fit.ckpt", dir);
  snprintf(logs, sizeof logs, "%s/fitlogs", dir);
  clear_slurm();
  setenv("SLURM_JOB_ID", "100", 1);
  assert_non_null(f = tmpfile());
  assert_int_equal(fit_job(ckpt, logs, 2, 1, f, &step), TR_OK);
  setenv("SLURM_JOB_ID", "200", 1);
  setenv("SLURM_RESTART_COUNT", "1", 1);
  assert_int_equal(fit_job(ckpt, logs, 4, 0, f, &step), TR_OK);
  text = log_text(f);
  if (!strstr(text, "was written by Slurm job 100") || !strstr(text, "not by this job (200): it is not resumed") || strstr(text, "resuming from"))
    fail_msg("%s", text);
  free(text);
  fclose(f);
  assert_non_null(f = tmpfile());
  setenv("SLURM_JOB_ID", "100", 1);
  assert_int_equal(fit_job(ckpt, logs, 4, 0, f, &step), TR_OK);
  assert_int_equal(step, 4);
  text = log_text(f);
  if (!strstr(text, "resuming from") || strstr(text, "not resumed") || strstr(text, "warning")) fail_msg("%s", text);
  free(text);
  fclose(f);
  snprintf(v, sizeof v, "%s/lightning_logs/version_2", logs); /* job 100's run went on in its version_0 */
  assert_int_equal(access(v, F_OK), -1);
  clear_slurm();
  setenv("PATH", saved_path, 1);
}

#define CLUSTER_TESTS \
    cmocka_unit_test_setup_teardown(test_slurm_env, cluster_setup, cluster_teardown), \
    cmocka_unit_test_setup_teardown(test_preempt_settings, cluster_setup, cluster_teardown), \
    cmocka_unit_test_setup_teardown(test_fit_refuses, cluster_setup, cluster_teardown), \
    cmocka_unit_test_setup_teardown(test_preempt_own_loop, cluster_setup, cluster_teardown), \
    cmocka_unit_test_setup_teardown(test_own_handler_left_alone, cluster_setup, cluster_teardown), \
    cmocka_unit_test_setup_teardown(test_agree, cluster_setup, cluster_teardown), \
    cmocka_unit_test_setup_teardown(test_agree_resumed, cluster_setup, cluster_teardown), \
    cmocka_unit_test_setup_teardown(test_requeue_messages, cluster_setup, cluster_teardown), \
    cmocka_unit_test_setup_teardown(test_requeue_own_job_only, cluster_setup, cluster_teardown)
