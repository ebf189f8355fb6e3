/* tests/test_watchdog.c - the watchdog callback (train/callbacks/watchdog.h): a hook that sleeps past the
   limit is reported with its event, its name and the step, in a loop of your own and in tr_fit; a stall
   in the loop's own code; a limit by the median step; action=exit ends the process with its status and
   leaves the csv lines written before whole (a child process); a run that does not hang reports nothing
   and its end joins the thread; bad parameters named at setup. Sleeps of 1-2 s against limits of 0.3 s:
   the margins are wide, nothing compares a clock against a tight bound.
   Under mpirun with one rank stuck in a hook: tests/watchdog_mpi.c. */
#include "test.h"
#include <time.h>

static void nap(double s) {
  struct timespec ts;
  ts.tv_sec = (time_t)s;
  ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
  while (nanosleep(&ts, &ts) != 0) {}
}

/* a hook that sleeps `secs` at the global step `at` */
typedef struct sleeper { int64_t at; double secs; int done; } sleeper; /* once */
static hk_signal sleepy(hk_ctx *ctx, void *u) {
  sleeper *z = (sleeper *)u;
  if (ctx->global_step == z->at && !z->done++) nap(z->secs);
  return HK_CONTINUE;
}

/* A loop of your own: `steps` steps, the watchdog from spec, `sleeper` on event ev (named "sleepy"), and
   loop_nap seconds of the loop's own code at step loop_at (-1: none); per-step work of step_secs. */
static tr_watchdog_state own_loop(const char *spec, int ev, sleeper *z, int64_t loop_at, double loop_nap, int steps,
                                  double step_secs, hk_registry **keep) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx *ctx;
  hk_handle h;
  tr_watchdog_state out;
  const tr__wd *s;
  ctx = tr_run_begin(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = steps, .lr = 0.1, .validation = TR_NO,
                                          .log_every_n_steps = -1, .no_signals = 1, .spec = spec }, NULL);
  assert_non_null(ctx);
  h = hk_spec_find(reg, "watchdog", 0);
  assert_true(h > 0);
  if (z) {
    hk_opts o = { 0 };
    o.name = "sleepy";
    assert_int_equal(hk_on(reg, ev, sleepy, z, &o, NULL), HK_OK);
  }
  while (tr_run_next(reg)) {
    if (ctx->global_step == loop_at) nap(loop_nap);
    if (step_secs > 0) nap(step_secs);
    ctx->loss = 1.0;
    HK_FIRE(reg, HK_ON_BEFORE_BACKWARD, ctx);
    HK_FIRE(reg, HK_ON_AFTER_BACKWARD, ctx);
    HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, ctx);
    (void)tr_run_update(reg);
  }
  assert_int_equal(tr_run_end(reg), TR_OK);
  s = (const tr__wd *)hk_callback_get(reg, h)->user;
  assert_int_equal(s->started, 0); /* teardown joined the thread */
  out = *tr_watchdog_get(reg, h);
  if (keep) *keep = reg;
  else hk_destroy(reg);
  return out;
}

static void test_hook_sleeps(void **state) {
  sleeper z = { 3, 2.0, 0 };
  tr_watchdog_state s;
  (void)state;
  s = own_loop("watchdog(seconds=0.3)", HK_ON_BEFORE_BACKWARD, &z, -1, 0, 6, 0, NULL);
  assert_int_equal(s.reports, 1);
  assert_non_null(strstr(s.last, "watchdog: no progress for "));
  assert_non_null(strstr(s.last, "(limit 0.3 s) at step 3 "));
  assert_non_null(strstr(s.last, ": in on_before_backward, hook 'sleepy' running\n"));
  /* the same at the step's end (an event the watchdog listens to itself) */
  z.at = 2;
  z.done = 0;
  s = own_loop("watchdog(seconds=0.3, poll=0.05)", HK_ON_TRAIN_BATCH_END, &z, -1, 0, 4, 0, NULL);
  assert_int_equal(s.reports, 1);
  assert_non_null(strstr(s.last, "at step 2 "));
  assert_non_null(strstr(s.last, ": in on_train_batch_end, hook 'sleepy' running\n"));
}

static void test_loop_code_stalls(void **state) {
  tr_watchdog_state s;
  (void)state;
  /* the loop's own code between events: no hook running, the last event whose hooks ran named */
  s = own_loop("watchdog(seconds=0.3)", 0, NULL, 2, 1.5, 4, 0, NULL);
  assert_int_equal(s.reports, 1);
  assert_non_null(strstr(s.last, "at step 2 "));
  assert_non_null(strstr(s.last, ": after on_train_batch_start, in the loop's own code (no hook running)\n"));
}

static hk_signal wait_in_collective(hk_ctx *ctx, void *u) {
  (void)u;
  if (ctx->global_step == 1) {
    tr_run_waiting("MPI_Allreduce (my gradients)");
    nap(1.5);
    tr_run_waiting(NULL);
  }
  return HK_CONTINUE;
}
static void test_waiting_named(void **state) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx *ctx;
  hk_handle h;
  (void)state;
  ctx = tr_run_begin(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = 3, .lr = 0.1, .validation = TR_NO, .log_every_n_steps = -1,
                                          .no_signals = 1, .spec = "watchdog(seconds=0.3)" }, NULL);
  assert_int_equal(hk_on(reg, HK_ON_AFTER_BACKWARD, wait_in_collective, NULL, NULL, NULL), HK_OK);
  h = hk_spec_find(reg, "watchdog", 0);
  while (tr_run_next(reg)) {
    ctx->loss = 1.0;
    HK_FIRE(reg, HK_ON_AFTER_BACKWARD, ctx);
    (void)tr_run_update(reg);
  }
  assert_int_equal(tr_run_end(reg), TR_OK);
  assert_int_equal(tr_watchdog_get(reg, h)->reports, 1);
  assert_non_null(strstr(tr_watchdog_get(reg, h)->last, ": waiting in MPI_Allreduce (my gradients), after on_after_backward\n"));
  hk_destroy(reg);
}

static void test_no_hang(void **state) {
  tr_watchdog_state s;
  hk_registry *reg;
  (void)state;
  s = own_loop("watchdog(seconds=5, multiple=50, warmup=2, poll=0.01)", 0, NULL, -1, 0, 40, 0.002, &reg);
  assert_int_equal(s.reports, 0);
  assert_string_equal(s.last, "");
  assert_true(s.median_step > 0 && s.median_step < 5); /* steps of ~2 ms measured */
  hk_destroy(reg); /* after teardown: nothing left to join */
  /* a registry destroyed before the run's end: destroy joins the thread */
  {
    hk_registry *r = hk_create(NULL);
    hk_ctx *ctx = tr_run_begin(r, &(tr_run_desc){ .epochs = TR_NO, .max_steps = 3, .lr = 0.1, .validation = TR_NO,
                                                 .log_every_n_steps = -1, .no_signals = 1, .spec = "watchdog(seconds=5)" }, NULL);
    assert_int_equal(tr_run_next(r), TR_RUN_TRAIN);
    assert_int_equal(((const tr__wd *)hk_callback_get(r, hk_spec_find(r, "watchdog", 0))->user)->started, 1);
    (void)ctx;
    hk_destroy(r);
  }
}

/* multiple: the limit follows the median step once the warmup has run */
static void test_multiple(void **state) {
  sleeper z = { 30, 2.0, 0 };
  tr_watchdog_state s;
  (void)state;
  s = own_loop("watchdog(multiple=10, warmup=3)", HK_ON_TRAIN_BATCH_START, &z, -1, 0, 34, 0.01, NULL);
  assert_int_equal(s.reports, 1);
  assert_true(s.median_step > 0 && s.limit > 0 && s.limit < 1.0); /* 10 x ~10 ms, well under the 2 s stall */
  assert_non_null(strstr(s.last, "at step 30 "));
  assert_non_null(strstr(s.last, ": in on_train_batch_start, hook 'sleepy' running\n"));
  /* before warmup steps have run a multiple alone watches nothing: a stall at step 1 is not reported */
  z.at = 1;
  z.secs = 1.0;
  z.done = 0;
  s = own_loop("watchdog(multiple=2, warmup=5)", HK_ON_TRAIN_BATCH_START, &z, -1, 0, 3, 0, NULL);
  assert_int_equal(s.reports, 0);
}

/* ---- tr_fit: a one-parameter model ---------------------------------------------------------------- */
#define ONE_BATCHES 4
#include "one.h"

static void test_fit(void **state) {
  one m = { { 1.0f }, { 0 } };
  tr_trainer t;
  tr_data data;
  tr_config c;
  sleeper z = { 4, 1.5, 0 };
  hk_opts o = { 0 };
  hk_handle h;
  (void)state;
  data = test_data(one_count, one_get, NULL);
  assert_int_equal(tr_init(&t, &(tr_desc){ .model = { .params = m.p, .grads = m.g, .n_params = 1, .tensors = one_tensors,
                                                      .n_tensors = 1, .user = &m, .forward = one_forward, .backward = one_backward },
                                           .optim = { .kind = TR_OPTIM_SGD, .lr = 0.1 } }), TR_OK);
  assert_int_equal(hk_spec_apply(t.reg, "watchdog(seconds=0.3)"), HK_OK);
  h = hk_spec_find(t.reg, "watchdog", 0);
  o.name = "slow_validation";
  assert_int_equal(hk_on(t.reg, HK_ON_VALIDATION_BATCH_START, sleepy, &z, &o, NULL), HK_OK);
  c = test_config(&data, &data, 3);
  c.num_sanity_val_steps = TR_ZERO;
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(tr_watchdog_get(t.reg, h)->reports, 1); /* the first validation (after step 4) stalls once */
  assert_non_null(strstr(tr_watchdog_get(t.reg, h)->last, "at step 4 (epoch 0, batch 3)")); /* the last training batch */
  assert_non_null(strstr(tr_watchdog_get(t.reg, h)->last, ": in on_validation_batch_start, hook 'slow_validation' running\n"));
  assert_int_equal(((const tr__wd *)hk_callback_get(t.reg, h)->user)->started, 0);
  tr_free(&t);
}

/* ---- action=exit: in a child; the parent reads its status, its stderr and its csv ---------------------- */
static void read_file(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  size_t n = 0;
  buf[0] = 0;
  if (!f) return;
  n = fread(buf, 1, cap - 1, f);
  buf[n] = 0;
  fclose(f);
}
static void test_exit(void **state) {
  char dir[] = "/tmp/wd_exitXXXXXX", err_path[256], csv_path[512], text[8192], spec[600];
  int status, lines = 0, commas = -1;
  const char *p;
  pid_t pid;
  (void)state;
  assert_non_null(mkdtemp(dir));
  snprintf(err_path, sizeof err_path, "%s/stderr.txt", dir);
  snprintf(spec, sizeof spec, "watchdog(seconds=0.3, action=exit, exit_code=3); csv(save_dir=%s, name=\"\", version=v, flush_every=1)", dir);
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) { /* the child: a loop whose step 4 hangs in a hook for good */
    sleeper z = { 4, 3600, 0 };
    hk_registry *reg = hk_create(NULL);
    hk_ctx *ctx;
    hk_opts o = { 0 };
    FILE *e = freopen(err_path, "w", stderr);
    (void)e;
    ctx = tr_run_begin(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = 10, .lr = 0.1, .validation = TR_NO,
                                            .log_every_n_steps = 1, .no_signals = 1, .spec = spec }, NULL);
    o.name = "stuck";
    if (!ctx || hk_on(reg, HK_ON_BEFORE_OPTIMIZER_STEP, sleepy, &z, &o, NULL) != HK_OK) _exit(90);
    while (tr_run_next(reg)) {
      ctx->loss = 0.5;
      HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, ctx);
      (void)tr_run_update(reg);
    }
    fprintf(stderr, "the run ended: %s\n", tr_err_name(tr_run_end(reg)));
    _exit(91); /* never: the watchdog ends the process first */
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  read_file(err_path, text, sizeof text);
  if (WEXITSTATUS(status) != 3) fail_msg("the child's status is %d, not 3; its stderr:\n%s", WEXITSTATUS(status), text);
  assert_non_null(strstr(text, "(limit 0.3 s) at step 4 "));
  assert_non_null(strstr(text, ": in on_before_optimizer_step, hook 'stuck' running\n"));
  assert_non_null(strstr(text, "\nwatchdog: exiting with status 3 (action=exit): the last checkpoint written stays; nothing else is saved\n"));
  /* the csv: a header and the rows of steps 0..3 (one a step, written at once), every line whole */
  snprintf(csv_path, sizeof csv_path, "%s/v/metrics.csv", dir);
  read_file(csv_path, text, sizeof text);
  assert_true(strlen(text) > 0 && text[strlen(text) - 1] == '\n');
  for (p = text; *p; p = strchr(p, '\n') + 1) {
    int k = 0;
    const char *q;
    for (q = p; *q != '\n'; q++) k += *q == ',';
    if (commas < 0) commas = k;
    assert_int_equal(k, commas);
    lines++;
  }
  if (lines != 1 + 4) fail_msg("metrics.csv: %d lines, not a header and 4 rows:\n%s", lines, text);
  snprintf(spec, sizeof spec, "rm -rf '%s'", dir);
  assert_int_equal(system(spec), 0);
}

static void test_bad_parameters(void **state) {
  hk_registry *reg = hk_create(NULL);
  (void)state;
  expect_spec_refused("watchdog", "watchdog: give a limit: seconds (e.g. watchdog(seconds=600)) or multiple");
  expect_spec_refused("watchdog(seconds=-1)", "watchdog: seconds must be a finite number >= 0 (got -1)");
  expect_spec_refused("watchdog(seconds=abc)", "seconds");
  expect_spec_refused("watchdog(multiple=0.5)", "watchdog: multiple must be > 1");
  expect_spec_refused("watchdog(seconds=1, action=kill)", "kill");
  expect_spec_refused("watchdog(seconds=1, action=kill)", "report|exit");
  expect_spec_refused("watchdog(seconds=1, exit_code=0)", "exit_code must be 1..255 (got 0)");
  expect_spec_refused("watchdog(seconds=1, exit_code=256)", "exit_code must be 1..255 (got 256)");
  expect_spec_refused("watchdog(seconds=1, warmup=0)", "warmup must be 1..1000000");
  expect_spec_refused("watchdog(seconds=1, poll=100)", "poll must be 0");
  expect_spec_refused("watchdog(seconds=1, limit=3)", "limit");
  assert_int_equal(tr_watchdog(reg, &(tr_watchdog_desc){ .seconds = 1, .action = (tr_watchdog_action)7 }, NULL), TR_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(reg), "action 7 is not valid (report or exit)"));
  assert_int_equal(tr_watchdog(reg, NULL, NULL), TR_ERR_INVALID);
  assert_int_equal(hk_count(reg, HK_ON_TRAIN_BATCH_END), 0); /* nothing registered */
  assert_null(tr_watchdog_get(reg, 1));
  hk_destroy(reg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_hook_sleeps),
    cmocka_unit_test(test_loop_code_stalls),
    cmocka_unit_test(test_waiting_named),
    cmocka_unit_test(test_no_hang),
    cmocka_unit_test(test_multiple),
    cmocka_unit_test(test_fit),
    cmocka_unit_test(test_exit),
    cmocka_unit_test(test_bad_parameters),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
