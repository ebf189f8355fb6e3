/* tests/test_mlflow.c - the mlflow logger (train/loggers/mlflow.h).

   cmocka tests, no MLflow needed (a fake server in a child process answers as MLflow does and records
   every request): bad tracking URIs, tags and numbers refused at construction with what is right; the
   request bodies (NaN and infinities as MLflow's strings, names escaped, at most 1000 metrics and 100
   params a request, the run created once, ended FINISHED / FAILED / KILLED); the run id in checkpoints
   continued by a resume; a server that is down (a closed port): the step does not wait, the queue keeps
   max_queue values, one line at the end says how many were dropped and not sent; a frozen server (takes
   the connection, never answers) given up after timeout_ms; rank 1 sends nothing. Built without
   TRAIN_MLFLOW: the one test that "mlflow" names the define and the library.
   Modes for tests/mlflow.sh (a real `mlflow server`; tests/mlflow_check.py reads it back):
     test_mlflow --fit URI DIR NAME [fail|ctrl_c] [resume]   tr_fit with csv and mlflow (run name NAME)
     test_mlflow --own URI DIR NAME STEPS [ctrl_c|fail|pause] [resume]   a loop of its own (the run layer)
   Each writes DIR/metrics.csv (csv logger, version "v") and DIR/run_id, the MLflow run's id. */
#include "test.h"

#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <time.h>

static double now_s(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec; }

/* ---- a loop of its own: loss = 1/(1+step), a metric that is NaN, +inf, -inf in turn ------------------ */
static float w_own[2];
static int save_model(void *u, FILE *f) { (void)u; return fwrite(w_own, sizeof w_own, 1, f) != 1; }
static int load_model(void *u, FILE *f) { (void)u; return fread(w_own, sizeof w_own, 1, f) != 1; }
static const char *g_what = "";
static hk_signal add_odd(hk_ctx *ctx, void *u) { /* on_log: values JSON cannot hold; names MLflow refuses (what: names) */
  tr_log_record *r = tr_log_current(ctx);
  static const double odd[4] = { 0.25, NAN, INFINITY, -INFINITY };
  (void)u;
  if (r && !strcmp(r->stage, "train")) tr_log_set(r, "odd", odd[(r->step / 5) % 4]);
  if (r && !strcmp(r->stage, "train") && !strcmp(g_what, "names")) {
    tr_log_set(r, "val//acc", 0.5 + (double)r->step);
    tr_log_set(r, "loss/", 1.0 + (double)r->step);
    tr_log_set(r, "\xc3\xbc-acc", 2.0 + (double)r->step);
  }
  return HK_CONTINUE;
}
static hk_signal fail_at(hk_ctx *ctx, void *u) {
  return ctx->global_step == *(int64_t *)u ? hk_fail(ctx, "the test fails the run at step %lld", (long long)ctx->global_step) : HK_CONTINUE;
}
static void write_run_id(hk_registry *reg, const char *dir) {
  tr_mlflow_state st;
  char path[600];
  FILE *f;
  snprintf(path, sizeof path, "%s/run_id", dir);
  if (tr_mlflow_get(reg, hk_find(reg, "mlflow"), &st) != TR_OK || !(f = fopen(path, "w"))) return;
  fprintf(f, "%s\n", st.run_id);
  fclose(f);
}
/* STEPS steps, a record every 5, a validation every 10; what: "" | ctrl_c (at step 23) | fail (at 23) |
   pause (at step 20: prints PAUSE and waits for DIR/go, so that the script stops the server) | pause_end |
   pause_end_fail (the same, then failed at 23) | again (a new run beside, in DIR/v2). The run's
   checkpoint DIR/last.ckpt at its end; resume: from it. */
static int mode_own(const char *uri, const char *dir, const char *name, long steps, const char *what, int resume,
                    double flush_timeout, int max_queue, double *per_step) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  char spec[1500], ckpt[600], go[600];
  unsigned next;
  int64_t fail_step = 23;
  double t0;
  tr_err e;
  memset(&ctx, 0, sizeof ctx);
  snprintf(ckpt, sizeof ckpt, "%s/last.ckpt", dir);
  snprintf(go, sizeof go, "%s/go", dir);
  tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = steps, .log_every_n_steps = 5, .optimizer = "SGD",
                                    .hparams = "lr=0.1 width=8", .save_model = save_model,
                                    .load_model = load_model, .no_resume_message = 1 });
  tr_run_hparam_num(reg, "seed", 7);
  tr_run_hparam(reg, "data", "two clouds");
  g_what = what;
  if (!strcmp(what, "names")) tr_run_hparam(reg, "bad//key", "kept");
  snprintf(spec, sizeof spec, "csv(save_dir=\"%s\", name=\"\", version=%s); mlflow(tracking_uri=\"%s\", experiment=\"train.h tests\", "
           "run_name=\"%s\", tags=\"suite=mlflow,loop=own\", flush_timeout=%g, max_queue=%d, timeout_ms=%d)",
           dir, !strcmp(what, "again") ? "v2" : "v", uri, name, flush_timeout, max_queue, !strcmp(what, "slow") ? 100 : 2000); /* slow: behind tests/mlflow.sh's proxy */
  if (hk_spec_apply(reg, spec) != HK_OK) { fprintf(stderr, "%s\n", hk_last_error(reg)); return 1; }
  hk_on(reg, HK_ON_LOG, add_odd, NULL, &(hk_opts){ .order = -1 }, NULL);
  if (strstr(what, "fail")) hk_on(reg, HK_ON_TRAIN_BATCH_END, fail_at, &fail_step, NULL, NULL);
  next = tr_run_start(reg, &ctx, resume ? ckpt : NULL) ? TR_RUN_STOP : 0;
  t0 = now_s();
  while (!(next & TR_RUN_STOP) && ctx.global_step < steps) {
    ctx.batch_idx = ctx.global_step;
    tr_run_lr(reg, &ctx, 0.1);
    if (!strcmp(what, "ctrl_c") && ctx.global_step == 23) raise(SIGINT);
    if (!strncmp(what, "pause", 5) && ctx.global_step == 20) {
      printf("PAUSE\n");
      fflush(stdout);
      while (access(go, F_OK) != 0) { struct timespec ts = { 0, 20000000 }; nanosleep(&ts, NULL); }
    }
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, &ctx, &flow);
    ctx.loss = 1.0 / (1.0 + (double)ctx.global_step);
    w_own[0] += 0.01f;
    ctx.global_step++;
    ctx.samples_seen += 4;
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);
    next = tr_run_batch_end(reg, &ctx, &flow);
    if (ctx.global_step % 10 == 0) {
      int64_t b;
      for (b = tr_run_eval_start(reg, &ctx, &flow, "val", 2); b < 2; b++) {
        ctx.batch_idx = b;
        HK_FIRE_FLOW(reg, HK_ON_VALIDATION_BATCH_START, &ctx, &flow);
        HK_FIRE_FLOW(reg, HK_ON_VALIDATION_BATCH_END, &ctx, &flow);
      }
      tr_run_eval_end(reg, &ctx, &flow, 2.0 / (1.0 + (double)ctx.global_step));
      next |= tr_run_batch_end(reg, &ctx, &flow);
    }
  }
  if (per_step) *per_step = (now_s() - t0) / (double)(ctx.global_step ? ctx.global_step : 1);
  if (!strncmp(what, "pause", 5)) { /* the server is stopped: the steps went on; the sender sees it down, the values wait */
    tr_mlflow_state st;
    int k;
    for (k = 0; k < 500; k++) {
      struct timespec ts = { 0, 20000000 };
      if (tr_mlflow_get(reg, hk_find(reg, "mlflow"), &st) == TR_OK && !st.up && st.queued > 0) break;
      nanosleep(&ts, NULL);
    }
    printf("DOWN SEEN: %lld values wait\n", (long long)st.queued);
    fflush(stdout);
  }
  if (!(next & TR_RUN_STOP) || !strcmp(what, "")) (void)tr_run_save(reg, &ctx, ckpt);
  e = tr_run_finish(reg, &ctx, TR_OK);
  if (strcmp(what, "again")) write_run_id(reg, dir); /* (again: DIR's run_id stays the first run's) */
  printf("own %s: ended at step %lld: %s\n", name, (long long)ctx.global_step, e ? tr_run_error(reg) : "ok");
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  return e == TR_OK ? 0 : e == TR_ERR_INTERRUPTED ? 130 : 2;
}

/* ---- tr_fit: a toy model, 3 epochs of 8 batches, a record every 3 steps ------------------------------ */
typedef struct toy { float p[2], g[2]; } toy;
static int toy_forward(void *user, void *batch, int training, double *loss) {
  toy *m = (toy *)user;
  (void)batch;
  *loss = training ? 1.0 + (double)m->p[0] * m->p[0] : 0.5 + 0.1 * (double)m->p[0];
  return 0;
}
static int toy_backward(void *user, void *batch) { toy *m = (toy *)user; (void)batch; m->g[0] += 2 * m->p[0]; m->g[1] += 0.5f; return 0; }
static int64_t toy_count(void *user) { (void)user; return 8; }
static int toy_get(void *user, int64_t i, void **batch) { (void)i; *batch = user; return 0; }
static hk_signal ctrl_c_at(hk_ctx *ctx, void *u) { if (ctx->global_step == *(int64_t *)u) raise(SIGINT); return HK_CONTINUE; }

static int mode_fit(const char *uri, const char *dir, const char *name, const char *what, int resume) {
  tr_trainer t;
  toy m;
  char spec[1500], ckpt[600];
  int64_t at = 13;
  tr_err e;
  tr_data train, val;
  memset(&m, 0, sizeof m);
  m.p[0] = 1.0f;
  memset(&train, 0, sizeof train);
  train.user = &m; train.count = toy_count; train.get = toy_get;
  val = train;
  if (tr_init(&t, &(tr_desc){ .model = { .params = m.p, .grads = m.g, .n_params = 2, .user = &m, .forward = toy_forward,
                                         .backward = toy_backward },
                              .optim = { .kind = TR_OPTIM_SGD, .lr = 0.1 }, .seed = 7 }) != TR_OK) return 1;
  tr_run_hparam(t.reg, "model", "toy");
  snprintf(spec, sizeof spec, "csv(save_dir=\"%s\", name=\"\", version=v); model_checkpoint(dirpath=\"%s\", save_last=true, "
           "save_top_k=0); mlflow(tracking_uri=\"%s\", experiment=\"train.h tests\", run_name=\"%s\", tags=\"suite=mlflow,loop=fit\")",
           dir, dir, uri, name);
  if (hk_spec_apply(t.reg, spec) != HK_OK) { fprintf(stderr, "%s\n", hk_last_error(t.reg)); return 1; }
  hk_on(t.reg, HK_ON_LOG, add_odd, NULL, &(hk_opts){ .order = -1 }, NULL);
  if (!strcmp(what, "fail")) hk_on(t.reg, HK_ON_TRAIN_BATCH_END, fail_at, &at, NULL, NULL);
  if (!strcmp(what, "ctrl_c")) hk_on(t.reg, HK_ON_TRAIN_BATCH_END, ctrl_c_at, &at, NULL, NULL);
  snprintf(ckpt, sizeof ckpt, "%s/last.ckpt", dir);
  e = tr_fit(&t, &(tr_config){ .train = &train, .val = &val, .max_epochs = resume ? 4 : 2, .log_every_n_steps = 3,
                               .resume_from = resume ? ckpt : NULL, .no_resume_message = 1 });
  write_run_id(t.reg, dir);
  printf("fit %s: %s\n", name, e ? tr_error(&t) : "ok");
  tr_free(&t);
  return e == TR_OK ? 0 : e == TR_ERR_INTERRUPTED ? 130 : 2;
}

#ifdef TRAIN_MLFLOW
/* ---- a fake MLflow server: answers as MLflow does, writes every request (path, then body) to a file ---- */
typedef struct fake { pid_t pid; int port; char log[256]; } fake;
static int listener(int *port, int backlog) {
  struct sockaddr_in a;
  socklen_t n = sizeof a;
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, backlog) || getsockname(fd, (struct sockaddr *)&a, &n)) return -1;
  *port = ntohs(a.sin_port);
  return fd;
}
static void fake_serve(int lfd, const char *log) {
  static char buf[4 << 20];
  FILE *f = fopen(log, "w");
  for (;;) {
    int c = accept(lfd, NULL, NULL);
    size_t have = 0;
    if (c < 0) continue;
    for (;;) { /* keep-alive: requests one after the other on this connection */
      char *end, *cl, path[512];
      const char *reply;
      char head[256];
      long len = 0;
      ssize_t k;
      while (!(end = strstr(buf, "\r\n\r\n"))) {
        if ((k = read(c, buf + have, sizeof buf - 1 - have)) <= 0) goto closed;
        have += (size_t)k;
        buf[have] = 0;
      }
      if ((cl = strstr(buf, "Content-Length: ")) != NULL && cl < end) len = atol(cl + 16);
      while ((long)(have - (size_t)(end + 4 - buf)) < len) {
        if ((k = read(c, buf + have, sizeof buf - 1 - have)) <= 0) goto closed;
        have += (size_t)k;
        buf[have] = 0;
        end = strstr(buf, "\r\n\r\n");
      }
      sscanf(buf, "%*s %511s", path);
      fprintf(f, "%s %.*s\n", path, (int)len, end + 4);
      fflush(f);
      reply = strstr(path, "get-by-name") ? "{\"experiment\": {\"experiment_id\": \"7\", \"lifecycle_stage\": \"active\"}}"
            : strstr(path, "runs/create") ? "{\"run\": {\"info\": {\"run_uuid\": \"abc123\", \"run_id\": \"abc123\"}}}" : "{}";
      snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n", strlen(reply));
      if (write(c, head, strlen(head)) < 0 || write(c, reply, strlen(reply)) < 0) break;
      have -= (size_t)(end + 4 - buf) + (size_t)len;
      memmove(buf, end + 4 + len, have);
      buf[have] = 0;
    }
  closed:
    close(c);
  }
}
static void fake_start(fake *fk) {
  int lfd = listener(&fk->port, 16);
  assert_true(lfd >= 0);
  snprintf(fk->log, sizeof fk->log, "/tmp/test_mlflow_fake.%ld", (long)getpid());
  fk->pid = fork();
  assert_true(fk->pid >= 0);
  if (fk->pid == 0) { fake_serve(lfd, fk->log); _exit(0); }
  close(lfd);
}
static char *fake_stop(fake *fk) { /* the requests, as one string (free it) */
  FILE *f;
  long n;
  char *text;
  kill(fk->pid, SIGKILL);
  waitpid(fk->pid, NULL, 0);
  assert_non_null(f = fopen(fk->log, "r"));
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  rewind(f);
  text = (char *)calloc(1, (size_t)n + 1);
  assert_true(fread(text, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  unlink(fk->log);
  return text;
}
static int count_overlapping(const char *text, const char *what) { int n = 0; for (; (text = strstr(text, what)) != NULL; text++) n++; return n; }

/* A record of a loop of its own with values v[0..n-1] for names "m0".. at step */
static void emit(hk_registry *reg, hk_ctx *ctx, tr_log_record *r, int64_t step, int n, const double *v, const char *const *names) {
  int i;
  char nm[32];
  r->n_metrics = 0;
  r->step = step;
  r->stage = "train";
  for (i = 0; i < n; i++) {
    snprintf(nm, sizeof nm, "m%d", i);
    tr_log_set(r, names ? names[i] : nm, v[i]);
  }
  tr_log_emit(reg, ctx, r);
}
static FILE *g_log;
static hk_registry *reg_with(const char *spec) {
  hk_registry *reg = hk_create(NULL);
  if (!g_log) g_log = tmpfile();
  tr_run_setup(reg, &(tr_run_desc){ .log = g_log });
  if (hk_spec_apply(reg, spec) != HK_OK) { fprintf(stderr, "%s\n", hk_last_error(reg)); hk_destroy(reg); return NULL; }
  return reg;
}
static char *log_text(void);
/* A run started with mlflow(tracking_uri=<the port>, PARAMS) registered, its context and record zeroed, the log read
   up to here. */
static hk_registry *started(int port, const char *params, hk_ctx *ctx, tr_log_record *r) {
  char spec[300];
  hk_registry *reg;
  snprintf(spec, sizeof spec, "mlflow(tracking_uri=\"http://127.0.0.1:%d\", %s)", port, params);
  assert_non_null(reg = reg_with(spec));
  memset(ctx, 0, sizeof *ctx);
  memset(r, 0, sizeof *r);
  free(log_text());
  assert_int_equal(tr_run_start(reg, ctx, NULL), TR_OK);
  return reg;
}
static char *log_text(void) { /* what the run's log got since the last call */
  static long at;
  long n;
  char *text;
  fflush(g_log);
  fseek(g_log, 0, SEEK_END);
  n = ftell(g_log) - at;
  fseek(g_log, at, SEEK_SET);
  text = (char *)calloc(1, (size_t)n + 1);
  if (fread(text, 1, (size_t)n, g_log) != (size_t)n) text[0] = 0;
  at += n;
  return text;
}

static void test_bad_input(void **state) {
  static const char *const bad[][2] = {
    { "mlflow(tracking_uri=\"ftp://h:1\")", "is not http://host:port" },
    { "mlflow(tracking_uri=\"file:///tmp/mlruns\")", "file stores" },
    { "mlflow(tracking_uri=\"http://\")", "has no host" },
    { "mlflow(tracking_uri=\"http://h:99999\")", "1..65535" },
    { "mlflow(tracking_uri=\"http://h:50x0\")", "1..65535" },
    { "mlflow(tracking_uri=\"http://h:5000/a b\")", "a space" },
    { "mlflow(tracking_uri=\"http://h:5000/?x=1\")", "'?'" },
    { "mlflow(tracking_uri=\"http://h:1\", tags=\"novalue\")", "key=value" },
    { "mlflow(tracking_uri=\"http://h:1\", tags=\"=v\")", "key=value" },
    { "mlflow(tracking_uri=\"http://h:1\", timeout_ms=0)", "timeout_ms must be > 0" },
    { "mlflow(tracking_uri=\"http://h:1\", max_queue=-3)", "max_queue must be in 1..1e8" },
    { "mlflow(tracking_uri=\"http://h:1\", flush_timeout=-1)", "flush_timeout" },
  };
  size_t i;
  hk_registry *reg = hk_create(NULL);
  (void)state;
  tr_run_setup(reg, NULL);
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(hk_spec_apply(reg, bad[i][0]), HK_ERR_INVALID);
    if (!strstr(hk_last_error(reg), bad[i][1])) fail_msg("%s: %s", bad[i][0], hk_last_error(reg));
  }
  unsetenv("MLFLOW_TRACKING_URI");
  assert_int_equal(tr_mlflow_logger(reg, &(tr_mlflow_desc){ 0 }, NULL), TR_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(reg), "MLFLOW_TRACKING_URI is not set"));
  setenv("MLFLOW_TRACKING_URI", "https://[::1]:5000/mlflow/", 1); /* the environment's, when none is given */
  assert_int_equal(tr_mlflow_logger(reg, &(tr_mlflow_desc){ 0 }, NULL), TR_OK);
  setenv("MLFLOW_TRACKING_URI", "localhost:5000", 1);
  assert_int_equal(hk_spec_apply(reg, "mlflow"), HK_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(reg), "'localhost:5000' is not http://host:port"));
  unsetenv("MLFLOW_TRACKING_URI");
  hk_destroy(reg); /* never started: no thread, nothing sent */
}

/* The bodies: the run once, params in requests of at most 100, metrics of at most 1000, NaN and infinities
   as strings, names escaped, FINISHED at the end; the run id in a checkpoint continued by a resume. */
static void test_requests(void **state) {
  fake fk;
  char spec[300], *text, *p, ckpt[] = "/tmp/test_mlflow_ckpt.XXXXXX";
  hk_registry *reg;
  hk_ctx ctx;
  tr_log_record r;
  static const double odd[5] = { NAN, INFINITY, -INFINITY, 0.1, -2.5e-300 };
  static const char *const odd_names[5] = { "nan", "inf", "ninf", "bad\"name(x)", "tiny" };
  double v[2500];
  int i, n_metric_req = 0, most = 0;
  int fd = mkstemp(ckpt);
  (void)state;
  close(fd);
  unlink(ckpt);
  fake_start(&fk);
  snprintf(spec, sizeof spec, "mlflow(tracking_uri=\"http://127.0.0.1:%d\", experiment=\"e x\", run_name=r1, tags=\"a=1,b=two words\")", fk.port);
  assert_non_null(reg = reg_with(spec));
  for (i = 0; i < 150; i++) { char k[16]; snprintf(k, sizeof k, "h%03d", i); tr_run_hparam_num(reg, k, i); }
  tr_run_setup(reg, &(tr_run_desc){ .log = g_log, .save_model = save_model, .load_model = load_model, .epochs = TR_NO });
  memset(&ctx, 0, sizeof ctx);
  memset(&r, 0, sizeof r);
  for (i = 0; i < 2500; i++) v[i] = i * 0.5;
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  emit(reg, &ctx, &r, 3, 5, odd, odd_names);
  emit(reg, &ctx, &r, 4, 2500, v, NULL); /* 2501 values with the epoch: three requests */
  assert_int_equal(tr_run_save(reg, &ctx, ckpt), TR_OK);
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  hk_destroy(reg);
  /* a resume of that checkpoint: the same MLflow run, RUNNING again, then FAILED */
  assert_non_null(reg = reg_with(spec));
  tr_run_setup(reg, &(tr_run_desc){ .log = g_log, .save_model = save_model, .load_model = load_model, .epochs = TR_NO });
  assert_int_equal(tr_run_start(reg, &ctx, ckpt), TR_OK);
  emit(reg, &ctx, &r, 5, 1, v, NULL);
  assert_int_equal(tr_run_finish(reg, &ctx, TR_ERR_HOOK), TR_ERR_HOOK);
  hk_destroy(reg);
  tr_log_record_free(&r);
  hk_ctx_free(&ctx);
  unlink(ckpt);
  text = fake_stop(&fk);
  assert_int_equal(count_overlapping(text, "/runs/create "), 1);
  assert_non_null(strstr(text, "get-by-name?experiment_name=e%20x "));
  assert_non_null(strstr(text, "\"run_name\":\"r1\""));
  assert_non_null(strstr(text, "{\"key\":\"b\",\"value\":\"two words\"}"));
  assert_non_null(strstr(text, "{\"key\":\"nan\",\"value\":\"NaN\",\"timestamp\":"));
  assert_non_null(strstr(text, "{\"key\":\"inf\",\"value\":\"Infinity\","));
  assert_non_null(strstr(text, "{\"key\":\"ninf\",\"value\":\"-Infinity\","));
  assert_null(strstr(text, "bad\\\"name")); /* a name MLflow refuses is not sent as it is: it would cost the whole request */
  assert_non_null(strstr(text, "{\"key\":\"bad_name_x_\",\"value\":0.1,")); /* mended (issue 37, item 5) */
  assert_non_null(strstr(text, "{\"key\":\"specs\",\"value\":\"mlflow(tracking_uri=\\\"http://127.0.0.1:")); /* escaped */
  assert_non_null(strstr(text, "{\"key\":\"tiny\",\"value\":-2.5e-300,"));
  assert_null(strstr(text, ":nan")); assert_null(strstr(text, ":inf")); assert_null(strstr(text, ":NaN"));
  for (p = text; (p = strstr(p, "/runs/log-batch {\"run_id\":\"abc123\",\"metrics\":[")) != NULL; p++) {
    char *eol = strchr(p, '\n');
    int k = 0;
    char *q;
    for (q = p; q < eol && (q = strstr(q, "\"key\":")) != NULL && q < eol; q++) k++;
    assert_true(k <= 1000);
    if (k > most) most = k;
    n_metric_req++;
  }
  assert_int_equal(most, 1000);
  assert_true(n_metric_req >= 4); /* 6 values, then 2501 values, then the resumed one */
  assert_int_equal(count_overlapping(text, "\"params\":["), 3); /* 153 params in two requests; the resumed run's 3 in one */
  assert_non_null(strstr(text, "{\"key\":\"h149\",\"value\":\"149\"}"));
  assert_non_null(strstr(text, "{\"run_id\":\"abc123\",\"status\":\"FINISHED\",\"end_time\":"));
  assert_non_null(strstr(text, "/runs/update {\"run_id\":\"abc123\",\"status\":\"RUNNING\"}"));
  assert_non_null(strstr(text, "{\"run_id\":\"abc123\",\"status\":\"FAILED\",\"end_time\":"));
  free(text);
  free(log_text());
}

/* Nobody at the port: the steps do not wait; max_queue values kept, the rest dropped; one line at the end. */
static void test_down(void **state) {
  int port, fd = listener(&port, 1), i;
  char *text;
  hk_registry *reg;
  hk_ctx ctx;
  tr_log_record r;
  double v[3] = { 1, 2, 3 }, t0, slowest = 0;
  tr_mlflow_state st;
  (void)state;
  close(fd); /* a closed port: connections refused */
  reg = started(port, "max_queue=10, flush_timeout=0.3", &ctx, &r);
  for (i = 0; i < 20; i++) { /* 4 values a record: 80 */
    double t = now_s();
    emit(reg, &ctx, &r, i, 3, v, NULL);
    if (now_s() - t > slowest) slowest = now_s() - t;
  }
  assert_true(slowest < 0.05);
  t0 = now_s();
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  assert_true(now_s() - t0 < 2.0);
  assert_int_equal(tr_mlflow_get(reg, hk_find(reg, "mlflow"), &st), TR_OK);
  assert_int_equal(st.dropped, 70);
  assert_int_equal(st.queued, 10);
  assert_int_equal(st.sent, 0);
  hk_destroy(reg);
  tr_log_record_free(&r);
  hk_ctx_free(&ctx);
  text = log_text();
  if (!strstr(text, "does not answer") || count_overlapping(text, "metric values are not in MLflow") != 1 ||
      !strstr(text, "80 metric values are not in MLflow: 70 dropped") || !strstr(text, "10 not sent within flush_timeout=0.3s"))
    fail_msg("the log says:\n%s", text);
  free(text);
}

/* A server that takes the connection and never answers: each request ends after timeout_ms. */
static void test_frozen(void **state) {
  int port, fd = listener(&port, 64);
  char *text;
  hk_registry *reg;
  hk_ctx ctx;
  tr_log_record r;
  double v[1] = { 1 }, t0;
  (void)state;
  reg = started(port, "timeout_ms=200, flush_timeout=0.5", &ctx, &r);
  t0 = now_s();
  emit(reg, &ctx, &r, 0, 1, v, NULL);
  assert_true(now_s() - t0 < 0.05);
  { struct timespec ts = { 0, 400000000 }; nanosleep(&ts, NULL); } /* the first request times out meanwhile */
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  t0 = now_s();
  hk_destroy(reg); /* a request in flight ends within timeout_ms */
  assert_true(now_s() - t0 < 0.5);
  close(fd);
  tr_log_record_free(&r);
  hk_ctx_free(&ctx);
  text = log_text();
  if (!strstr(text, "does not answer (Operation timed out") || !strstr(text, "2 metric values are not in MLflow: 2 not sent within flush_timeout=0.5s (Operation timed out"))
    fail_msg("the log says:\n%s", text);
  free(text);
}

/* Rank 1 sends nothing (no thread, no request); Ctrl-C's run ends KILLED. */
static void test_rank1_and_killed(void **state) {
  fake fk;
  char spec[300], *text;
  hk_registry *reg;
  hk_ctx ctx;
  tr_log_record r;
  double v[1] = { 1 };
  (void)state;
  fake_start(&fk);
  snprintf(spec, sizeof spec, "mlflow(tracking_uri=\"http://127.0.0.1:%d\")", fk.port);
  assert_non_null(reg = reg_with(spec));
  memset(&ctx, 0, sizeof ctx);
  memset(&r, 0, sizeof r);
  ctx.rank = 1;
  ctx.world_size = 2;
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  emit(reg, &ctx, &r, 0, 1, v, NULL);
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  hk_destroy(reg);
  assert_non_null(reg = reg_with(spec));
  ctx.rank = 0;
  ctx.world_size = 1;
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  emit(reg, &ctx, &r, 0, 1, v, NULL);
  tr_run_fail(reg, TR_ERR_INTERRUPTED, "interrupted (SIGINT or SIGTERM)");
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_ERR_INTERRUPTED);
  hk_destroy(reg);
  tr_log_record_free(&r);
  hk_ctx_free(&ctx);
  text = fake_stop(&fk);
  assert_int_equal(count_overlapping(text, "/runs/create "), 1);
  assert_non_null(strstr(text, "\"status\":\"KILLED\""));
  free(text);
  free(log_text());
}
#endif /* TRAIN_MLFLOW */

/* Built without TRAIN_MLFLOW: the name says which define and library to add. */
static void test_define_missing(void **state) {
  hk_registry *reg = hk_create(NULL);
  (void)state;
  tr_run_setup(reg, NULL);
#ifdef TRAIN_MLFLOW
  assert_int_equal(hk_spec_apply(reg, "mlflow(tracking_uri=\"http://127.0.0.1:1\")"), HK_OK);
#else
  assert_int_equal(hk_spec_apply(reg, "mlflow(tracking_uri=\"http://127.0.0.1:1\")"), HK_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(reg), "-DTRAIN_MLFLOW and link with -lcurl"));
  assert_non_null(strstr(hk_last_error(reg), "libcurl4-openssl-dev"));
  assert_int_equal(tr_mlflow_logger(reg, &(tr_mlflow_desc){ .tracking_uri = "http://h:1" }, NULL), TR_ERR_INVALID);
#endif
  hk_destroy(reg);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_define_missing),
#ifdef TRAIN_MLFLOW
    cmocka_unit_test(test_bad_input),
    cmocka_unit_test(test_requests),
    cmocka_unit_test(test_down),
    cmocka_unit_test(test_frozen),
    cmocka_unit_test(test_rank1_and_killed),
#endif
  };
  int i, resume = 0;
  const char *what = "";
  signal(SIGPIPE, SIG_IGN);
  for (i = argc >= 2 && !strcmp(argv[1], "--fit") ? 5 : 6; i < argc; i++) {
    if (!strcmp(argv[i], "resume")) resume = 1;
    else if (argv[i][0] < '0' || argv[i][0] > '9') what = argv[i];
  }
#ifdef TRAIN_MLFLOW
  if (argc == 3 && !strcmp(argv[1], "--fake")) { int port, fd = listener(&port, 16); printf("%d\n", port); fflush(stdout); fake_serve(fd, argv[2]); }
#endif
  if (argc >= 5 && !strcmp(argv[1], "--fit")) return mode_fit(argv[2], argv[3], argv[4], what, resume);
  if (argc >= 6 && !strcmp(argv[1], "--own"))
    return mode_own(argv[2], argv[3], argv[4], atol(argv[5]), what, resume, !strcmp(what, "pause") ? 60 : !strncmp(what, "pause_end", 9) ? 1 : 10,
                    100000, NULL);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
