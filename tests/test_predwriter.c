/* tests/test_predwriter.c - the prediction_writer callback (train/callbacks/prediction_writer.h): tr_predict
   writing csv, jsonl and safetensors at every write_interval, read back and compared bit for bit (csv and jsonl
   parsed with strtof, safetensors with train.h's reader); a loop of your own firing the predict events itself;
   ctx->outputs NULL or malformed failing the run with what was expected; a file of yours never replaced; a
   directory that cannot be written; a second run over its own files; a resumed run (a second process) over its
   own files, never another run's or a file put there since; the default directory. Built by
   tests/predwriter.mk: plain, ASan+UBSan, valgrind. One mode for tests/pw_check.py (the real safetensors package):
     test_predwriter --write DIR   tr_predict's files in DIR (safetensors per batch and per epoch, csv, jsonl) */
#include "test.h"

#include <errno.h>

static char g_root[256];

/* ---- the model: batch b has ROWS(b) rows of COLS predictions, v(b, r, c) = (100b + 10r + c) / 7 (floats that
   need all 9 digits), with a few awkward ones: the largest float, the smallest normal, -0, a denormal ---- */
#define NB 4
#define COLS 3
#define ROWS(b) ((b) == NB - 1 ? 2 : 3)
static float value(int64_t b, int64_t r, int64_t c) {
  if (b == 1 && r == 0) return c == 0 ? 3.40282347e38f : c == 1 ? 1.17549435e-38f : -0.0f;
  if (b == 2 && r == 2 && c == 2) return 1.4e-45f;
  return (float)(100 * b + 10 * r + c) / 7.0f;
}
static float OUT[3 * COLS];
static tr_predictions PRED;
static const char *const NAMES[COLS] = { "p", "q", "r" };
static int g_mode; /* 0 right; 1 outputs NULL; 2 cols 0; 3 batch 2 with 4 columns; 4 an empty name; 5 names */
static int predict(void *u, void *batch, void **outputs) {
  int64_t b = (int64_t)(intptr_t)batch, r, c;
  (void)u;
  for (r = 0; r < ROWS(b); r++)
    for (c = 0; c < COLS; c++) OUT[r * COLS + c] = value(b, r, c);
  PRED.values = OUT;
  PRED.rows = ROWS(b);
  PRED.cols = g_mode == 2 ? 0 : g_mode == 3 && b == 2 ? 4 : COLS;
  PRED.names = g_mode == 5 ? NAMES : NULL;
  if (g_mode == 4) { static const char *const bad[COLS] = { "p", "", "r" }; PRED.names = bad; }
  *outputs = g_mode == 1 ? NULL : &PRED;
  return 0;
}
static int fwd(void *u, void *batch, int training, double *loss) { (void)u; (void)batch; (void)training; *loss = 1; return 0; }
static int bwd(void *u, void *batch) { (void)u; (void)batch; return 0; } /* (a fit before the predict run) */
static int64_t count(void *u) { (void)u; return NB; }
static int get(void *u, int64_t i, void **b) { (void)u; *b = (void *)(intptr_t)i; return 0; }
static float P[2], G[2];
static tr_data g_data;
static void init_trainer(tr_trainer *t) {
  tr_desc d;
  memset(&d, 0, sizeof d);
  d.model.params = P; d.model.grads = G; d.model.n_params = 2;
  d.model.forward = fwd; d.model.backward = bwd; d.model.predict = predict;
  d.optim.kind = TR_OPTIM_SGD;
  d.optim.lr = 0.1;
  d.log = stderr;
  assert_int_equal(tr_init(t, &d), TR_OK);
  memset(&g_data, 0, sizeof g_data);
  g_data.count = count;
  g_data.get = get;
}

static void path_of(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", g_root, name); }
static int exists(const char *path) { struct stat st; return lstat(path, &st) == 0; }
static void same_float(float got, float want) { assert_memory_equal(&got, &want, sizeof got); } /* bits: -0 is not 0 */

/* csv: the header, then every batch's rows in order, each value reading back to the same float */
static void check_csv(const char *path, int names) {
  char *s = slurp(path), *p, *end;
  int64_t b, r, c;
  assert_non_null(s);
  assert_string_equal(strstr(s, "\n") ? (*strstr(s, "\n") = 0, s) : "", names ? "batch,row,p,q,r" : "batch,row,col0,col1,col2");
  p = s + strlen(s) + 1;
  for (b = 0; b < NB; b++)
    for (r = 0; r < ROWS(b); r++) {
      assert_int_equal(strtoll(p, &end, 10), b);
      assert_int_equal(*end, ',');
      assert_int_equal(strtoll(end + 1, &end, 10), r);
      for (c = 0; c < COLS; c++) {
        assert_int_equal(*end, ',');
        same_float(strtof(end + 1, &end), value(b, r, c));
      }
      assert_int_equal(*end, '\n');
      p = end + 1;
    }
  assert_int_equal(*p, 0);
  free(s);
}
/* jsonl: one object a row, {"batch":b,"row":r,"col0":v,...} */
static void check_jsonl(const char *path, int names) {
  char *s = slurp(path), *p, *end, head[64], key[40];
  int64_t b, r, c;
  assert_non_null(s);
  p = s;
  for (b = 0; b < NB; b++)
    for (r = 0; r < ROWS(b); r++) {
      snprintf(head, sizeof head, "{\"batch\":%lld,\"row\":%lld", (long long)b, (long long)r);
      assert_memory_equal(p, head, strlen(head));
      p += strlen(head);
      for (c = 0; c < COLS; c++) {
        if (names) snprintf(key, sizeof key, ",\"%s\":", NAMES[c]);
        else snprintf(key, sizeof key, ",\"col%lld\":", (long long)c);
        assert_memory_equal(p, key, strlen(key));
        same_float(strtof(p + strlen(key), &end), value(b, r, c));
        p = end;
      }
      assert_memory_equal(p, "}\n", 2);
      p += 2;
    }
  assert_int_equal(*p, 0);
  free(s);
}
/* safetensors: "predictions" [rows, COLS] holding batches from..to-1 */
static void check_st(const char *path, int64_t from, int64_t to, const char *per_batch, int names) {
  float got[NB * 3 * COLS];
  int64_t rows = 0, b, r, c, at = 0;
  hk_tensor v;
  tr_safetensors_shape sh;
  tr_safetensors_meta m;
  char why[600];
  for (b = from; b < to; b++) rows += ROWS(b);
  memset(&v, 0, sizeof v);
  v.name = "predictions"; v.data = got; v.count = (size_t)(rows * COLS);
  sh.ndim = 2; sh.dims[0] = rows; sh.dims[1] = COLS;
  if (tr_safetensors_load(path, &v, 1, &sh, &m, why, sizeof why) != TR_OK) fail_msg("%s", why);
  for (b = from; b < to; b++)
    for (r = 0; r < ROWS(b); r++)
      for (c = 0; c < COLS; c++) same_float(got[at++], value(b, r, c));
  if (per_batch) assert_string_equal(tr_safetensors_meta_get(&m, "rows_per_batch"), per_batch);
  else assert_null(tr_safetensors_meta_get(&m, "rows_per_batch"));
  if (names) assert_string_equal(tr_safetensors_meta_get(&m, "columns"), "p,q,r");
  else assert_null(tr_safetensors_meta_get(&m, "columns"));
  tr_safetensors_meta_free(&m);
}
static void check_dir(const char *dir, tr_prediction_format f, tr_write_interval w, int names) {
  char p[700];
  int64_t b;
  if (f == TR_PREDICTION_CSV) { snprintf(p, sizeof p, "%s/predictions.csv", dir); check_csv(p, names); return; }
  if (f == TR_PREDICTION_JSONL) { snprintf(p, sizeof p, "%s/predictions.jsonl", dir); check_jsonl(p, names); return; }
  snprintf(p, sizeof p, "%s/predictions.safetensors", dir);
  if (w == TR_WRITE_BATCH) assert_false(exists(p));
  else check_st(p, 0, NB, "3,3,3,2", names);
  for (b = 0; b < NB; b++) {
    snprintf(p, sizeof p, "%s/predictions-batch_%lld.safetensors", dir, (long long)b);
    if (w == TR_WRITE_EPOCH) assert_false(exists(p));
    else check_st(p, b, b + 1, NULL, names);
  }
}

/* every format at every interval, in tr_predict; then a second run over its own files */
static void test_formats_intervals(void **state) {
  int f, w;
  (void)state;
  for (f = 0; f < 3; f++)
    for (w = 0; w < 3; w++) {
      tr_trainer t;
      hk_handle h;
      char dir[400], name[32];
      const tr_prediction_writer_state *st;
      snprintf(name, sizeof name, "fw%d%d", f, w);
      path_of(dir, sizeof dir, name);
      init_trainer(&t);
      g_mode = w == 1 ? 5 : 0; /* names at one interval of each format */
      assert_int_equal(tr_prediction_writer(t.reg, &(tr_prediction_writer_desc){ .dirpath = dir, .format = (tr_prediction_format)f,
                       .write_interval = (tr_write_interval)w }, &h), TR_OK);
      assert_int_equal(tr_predict(&t, &g_data, 0), TR_OK);
      check_dir(dir, (tr_prediction_format)f, (tr_write_interval)w, g_mode == 5);
      st = tr_prediction_writer_get(t.reg, h);
      assert_non_null(st);
      assert_string_equal(st->dirpath, dir);
      assert_int_equal(st->rows, 11);
      assert_int_equal(st->files, f == 2 ? (w != 1) * NB + (w != 0) : 1 + (w == 2));
      g_mode = 0;
      assert_int_equal(tr_predict(&t, &g_data, 0), TR_OK); /* its own files: written over */
      check_dir(dir, (tr_prediction_format)f, (tr_write_interval)w, 0);
      tr_free(&t);
    }
}

/* the spec string, in a loop of your own that fires the predict events itself */
/* A predict stage of a loop of your own entered on reg with spec registered: ctx and flow fresh. */
static void enter_predict(hk_registry *reg, const char *spec, hk_ctx *ctx, hk_flow *flow) {
  assert_int_equal(hk_spec_apply(reg, spec), HK_OK);
  memset(ctx, 0, sizeof *ctx);
  memset(flow, 0, sizeof *flow);
  assert_int_equal(tr_run_enter(reg, ctx, HK_STAGE_PREDICT, NULL), TR_OK);
}
static void test_own_loop(void **state) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow;
  char dir[400], spec[600], p[700];
  int64_t b;
  int f;
  (void)state;
  for (f = 0; f < 3; f++) {
    static const char *const fmt[] = { "csv", "jsonl", "safetensors" };
    snprintf(dir, sizeof dir, "%s/own%d", g_root, f);
    assert_int_equal(tr_run_setup(reg, NULL), TR_OK);
    snprintf(spec, sizeof spec, "prediction_writer(dirpath=%s, format=%s, write_interval=batch_and_epoch)", dir, fmt[f]);
    enter_predict(reg, spec, &ctx, &flow);
    HK_FIRE_FLOW(reg, HK_SETUP, &ctx, &flow);
    HK_FIRE_FLOW(reg, HK_ON_PREDICT_START, &ctx, &flow);
    HK_FIRE_FLOW(reg, HK_ON_PREDICT_EPOCH_START, &ctx, &flow);
    for (b = 0; b < NB && !HK_FLOW_HAS(&flow, HK_FLOW_STOP_EPOCH); b++) {
      ctx.batch_idx = b;
      HK_FIRE_FLOW(reg, HK_ON_PREDICT_BATCH_START, &ctx, &flow);
      assert_int_equal(predict(NULL, (void *)(intptr_t)b, &ctx.outputs), 0);
      HK_FIRE_FLOW(reg, HK_ON_PREDICT_BATCH_END, &ctx, &flow);
    }
    ctx.outputs = NULL;
    HK_FIRE_FLOW(reg, HK_ON_PREDICT_EPOCH_END, &ctx, &flow);
    HK_FIRE_FLOW(reg, HK_ON_PREDICT_END, &ctx, &flow);
    HK_FIRE_FLOW(reg, HK_TEARDOWN, &ctx, &flow);
    tr_run_leave(reg, &ctx);
    if (HK_FLOW_HAS(&flow, HK_FLOW_FAIL)) fail_msg("%s", ctx.hook_failure);
    check_dir(dir, (tr_prediction_format)f, TR_WRITE_BATCH_AND_EPOCH, 0);
    assert_int_equal(hk_off(reg, hk_spec_find(reg, "prediction_writer", 0)), HK_OK);
  }
  /* the same loop forgetting ctx->outputs: HK_FAIL at the first batch, saying what was expected */
  snprintf(dir, sizeof dir, "%s/own_null", g_root);
  snprintf(spec, sizeof spec, "prediction_writer(dirpath=%s)", dir);
  enter_predict(reg, spec, &ctx, &flow);
  HK_FIRE_FLOW(reg, HK_ON_PREDICT_START, &ctx, &flow);
  HK_FIRE_FLOW(reg, HK_ON_PREDICT_BATCH_END, &ctx, &flow);
  assert_true(HK_FLOW_HAS(&flow, HK_FLOW_FAIL));
  assert_non_null(strstr(ctx.hook_failure, "ctx->outputs is NULL: ctx->outputs must point at a tr_predictions"));
  tr_run_leave(reg, &ctx);
  snprintf(p, sizeof p, "%s/predictions.csv", dir);
  assert_false(exists(p));
  hk_destroy(reg);
}

/* ctx->outputs that is not what the writer needs: the run fails at that batch, naming what was expected */
static void test_bad_outputs(void **state) {
  static const struct { int mode; const char *says; } cases[] = {
    { 1, "failed in on_predict_batch_end: batch 0: ctx->outputs is NULL: ctx->outputs must point at a tr_predictions { values, rows, cols, names }" },
    { 2, "batch 0: the tr_predictions at ctx->outputs has rows 3, cols 0: rows >= 0 and cols in 1..1000000" },
    { 3, "batch 2 has 4 columns, the first batch had 3: every batch of a predict run gives the same columns" },
    { 4, "batch 0: column name 1 of the tr_predictions at ctx->outputs is empty" },
  };
  size_t i;
  (void)state;
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tr_trainer t;
    char dir[400];
    snprintf(dir, sizeof dir, "%s/bad%d", g_root, (int)i);
    init_trainer(&t);
    assert_int_equal(tr_prediction_writer(t.reg, &(tr_prediction_writer_desc){ .dirpath = dir }, NULL), TR_OK);
    g_mode = cases[i].mode;
    assert_int_equal(tr_predict(&t, &g_data, 0), TR_ERR_HOOK);
    g_mode = 0;
    if (!strstr(tr_error(&t), cases[i].says)) fail_msg("got: %s\nwant: %s", tr_error(&t), cases[i].says);
    tr_free(&t);
  }
  { /* bad parameters, refused at once */
    hk_registry *reg = hk_create(NULL);
    assert_int_equal(tr_prediction_writer(reg, &(tr_prediction_writer_desc){ .filename = "a/b" }, NULL), TR_ERR_INVALID);
    assert_non_null(strstr(hk_last_error(reg), "filename 'a/b' is a name without '/'"));
    assert_int_equal(tr_add_factories(reg), HK_OK);
    assert_int_not_equal(hk_spec_apply(reg, "prediction_writer(format=parquet)"), HK_OK);
    assert_non_null(strstr(hk_last_error(reg), "csv|jsonl|safetensors"));
    hk_destroy(reg);
  }
}

/* a file of yours where it would write: the run fails at on_predict_start, naming it; nothing written or replaced */
static void test_foreign_file(void **state) {
  static const struct { tr_prediction_format f; tr_write_interval w; const char *name; } cases[] = {
    { TR_PREDICTION_CSV, TR_WRITE_BATCH, "predictions.csv" },
    { TR_PREDICTION_JSONL, TR_WRITE_EPOCH, "predictions.jsonl" },
    { TR_PREDICTION_SAFETENSORS, TR_WRITE_EPOCH, "predictions.safetensors" },
    { TR_PREDICTION_SAFETENSORS, TR_WRITE_BATCH, "predictions-batch_2.safetensors" },
  };
  size_t i;
  (void)state;
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tr_trainer t;
    char dir[400], p[700], want[800], b0[700], *got;
    FILE *f;
    snprintf(dir, sizeof dir, "%s/foreign%d", g_root, (int)i);
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/%s", dir, cases[i].name);
    f = fopen(p, "w");
    assert_non_null(f);
    fputs("yours", f);
    fclose(f);
    init_trainer(&t);
    assert_int_equal(tr_prediction_writer(t.reg, &(tr_prediction_writer_desc){ .dirpath = dir, .format = cases[i].f,
                     .write_interval = cases[i].w }, NULL), TR_OK);
    assert_int_equal(tr_predict(&t, &g_data, 0), TR_ERR_HOOK);
    snprintf(want, sizeof want, "failed in on_predict_start: '%s' is there and was not written by this prediction_writer", p);
    if (!strstr(tr_error(&t), want)) fail_msg("got: %s", tr_error(&t));
    got = slurp(p);
    assert_string_equal(got, "yours");
    free(got);
    snprintf(b0, sizeof b0, "%s/predictions-batch_0.safetensors", dir);
    assert_false(exists(b0)); /* nothing written */
    tr_free(&t);
  }
}

/* a directory that cannot be written: without write permission, or (root writes anyway) a read-only mount */
static void test_readonly_dir(void **state) {
  char dir[400], cmd[900], sub[500];
  int ro = 0;
  tr_trainer t;
  (void)state;
  path_of(dir, sizeof dir, "ro");
  assert_int_equal(mkdir(dir, geteuid() != 0 ? 0555 : 0777), 0);
  snprintf(cmd, sizeof cmd, "mount -t tmpfs -o ro,size=64k tmpfs '%s' 2>/dev/null", dir);
  if (geteuid() == 0) ro = system(cmd) == 0;
  if (geteuid() != 0 || ro) {
    init_trainer(&t);
    assert_int_equal(tr_prediction_writer(t.reg, &(tr_prediction_writer_desc){ .dirpath = dir }, NULL), TR_OK);
    assert_int_equal(tr_predict(&t, &g_data, 0), TR_ERR_HOOK);
    if (!strstr(tr_error(&t), "failed in on_predict_start: the directory '") || !strstr(tr_error(&t), "' is not writable: "))
      fail_msg("got: %s", tr_error(&t));
    tr_free(&t);
    init_trainer(&t); /* a directory that cannot be made inside it */
    snprintf(sub, sizeof sub, "%s/sub", dir);
    assert_int_equal(tr_prediction_writer(t.reg, &(tr_prediction_writer_desc){ .dirpath = sub }, NULL), TR_OK);
    assert_int_equal(tr_predict(&t, &g_data, 0), TR_ERR_HOOK);
    if (!strstr(tr_error(&t), "failed in on_predict_start: cannot create the directory")) fail_msg("got: %s", tr_error(&t));
    tr_free(&t);
  } else print_message("(no read-only directory here: root without mount; skipped)\n");
  if (ro) {
    snprintf(cmd, sizeof cmd, "umount '%s'", dir);
    assert_int_equal(system(cmd), 0);
  }
  chmod(dir, 0777);
}

/* a resume that continues its run (a second process: a new trainer) replaces its own predictions in the run
   directory, which it refused as anyone's; another run's, and a file put there since, are still refused */
static void test_resumed_run_takes_back(void **state) {
  static const char *const spec = "csv(save_dir=logs); model_checkpoint(dirpath=ck, save_last=true); prediction_writer";
  const char *pred = "logs/lightning_logs/version_0/predictions/predictions.csv";
  char cwd[400], dir[400], *got;
  tr_trainer t;
  struct stat st0, st1;
  int k;
  (void)state;
  assert_non_null(getcwd(cwd, sizeof cwd));
  path_of(dir, sizeof dir, "resumed");
  mkdir(dir, 0755);
  assert_int_equal(chdir(dir), 0);
  for (k = 0; k < 2; k++) { /* the run, then its resume: each fits an epoch more and predicts */
    init_trainer(&t);
    assert_int_equal(hk_spec_apply(t.reg, spec), HK_OK);
    assert_int_equal(tr_fit(&t, &(tr_config){ .train = &g_data, .max_epochs = k + 1, .resume_from = k ? "ck/last.ckpt" : NULL }), TR_OK);
    if (tr_predict(&t, &g_data, 0) != TR_OK) fail_msg("predict run %d: %s", k, tr_error(&t));
    assert_string_equal(tr_prediction_writer_get(t.reg, hk_spec_find(t.reg, "prediction_writer", 0))->dirpath,
                        "logs/lightning_logs/version_0/predictions");
    check_csv(pred, 0);
    assert_int_equal(stat(pred, k ? &st1 : &st0), 0);
    tr_free(&t);
    got = slurp("logs/lightning_logs/version_0/predictions/.predictions.prediction_writer"); /* the record beside it */
    assert_non_null(got);
    if (strncmp(got, "prediction_writer 1 ", 20) || count_of(got, "\n") != 2 || !strstr(got, " predictions.csv\n"))
      fail_msg("the record: %s", got);
    free(got);
  }
  assert_true(st0.st_ino != st1.st_ino || st0.st_mtime != st1.st_mtime || st0.st_ctime != st1.st_ctime); /* written again */
  init_trainer(&t); /* another run (its own checkpoints, its own id) writing there: refused */
  assert_int_equal(hk_spec_apply(t.reg, "model_checkpoint(dirpath=ck2, save_last=true); "
                   "prediction_writer(dirpath=logs/lightning_logs/version_0/predictions)"), HK_OK);
  assert_int_equal(tr_fit(&t, &(tr_config){ .train = &g_data, .max_epochs = 1 }), TR_OK);
  assert_int_equal(tr_predict(&t, &g_data, 0), TR_ERR_HOOK);
  if (!strstr(tr_error(&t), "predictions.csv' is there and was not written by this prediction_writer")) fail_msg("got: %s", tr_error(&t));
  tr_free(&t);
  check_csv(pred, 0);
  assert_int_equal(unlink(pred), 0); /* a file of yours in its place (it may get the same inode) */
  {
    FILE *f = fopen(pred, "w");
    assert_non_null(f);
    fputs("yours", f);
    fclose(f);
  }
  init_trainer(&t); /* the run's next resume: the file is not its own any more */
  assert_int_equal(hk_spec_apply(t.reg, spec), HK_OK);
  assert_int_equal(tr_fit(&t, &(tr_config){ .train = &g_data, .max_epochs = 3, .resume_from = "ck/last.ckpt" }), TR_OK);
  assert_int_equal(tr_predict(&t, &g_data, 0), TR_ERR_HOOK);
  if (!strstr(tr_error(&t), "predictions.csv' is there and was not written by this prediction_writer")) fail_msg("got: %s", tr_error(&t));
  tr_free(&t);
  got = slurp(pred);
  assert_string_equal(got, "yours");
  free(got);
  assert_int_equal(chdir(cwd), 0);
}

/* the default directory: ./predictions without a logger, <run directory>/predictions with one */
static void test_default_dir(void **state) {
  char cwd[400], dir[400], p[800];
  tr_trainer t;
  hk_handle h;
  const tr_prediction_writer_state *st;
  (void)state;
  assert_non_null(getcwd(cwd, sizeof cwd));
  path_of(dir, sizeof dir, "cwd");
  mkdir(dir, 0755);
  assert_int_equal(chdir(dir), 0);
  init_trainer(&t);
  assert_int_equal(tr_prediction_writer(t.reg, &(tr_prediction_writer_desc){ .format = TR_PREDICTION_JSONL }, NULL), TR_OK);
  assert_int_equal(tr_predict(&t, &g_data, 0), TR_OK);
  check_jsonl("predictions/predictions.jsonl", 0);
  tr_free(&t);
  init_trainer(&t);
  assert_int_equal(hk_spec_apply(t.reg, "csv(save_dir=logs, name=m); prediction_writer(filename=out-{rank})"), HK_OK);
  h = hk_spec_find(t.reg, "prediction_writer", 0);
  assert_int_equal(tr_predict(&t, &g_data, 0), TR_OK);
  st = tr_prediction_writer_get(t.reg, h);
  assert_non_null(st);
  assert_string_equal(st->dirpath, "logs/m/version_0/predictions");
  snprintf(p, sizeof p, "%s/out-0.csv", st->dirpath);
  check_csv(p, 0);
  assert_string_equal(st->last_path, p);
  tr_free(&t);
  assert_int_equal(chdir(cwd), 0);
}

/* the writer's own float text: every float it writes reads back bit for bit, and is printf's "%.9g" text where the
   scaling is exact (1e-14 < |f| < 1e31): 300000 bit patterns of every exponent, and the edges */
static void test_float_text(void **state) {
  uint64_t seed = 12345;
  int i, exact = 0;
  (void)state;
  for (i = 0; i < 300000 + 512; i++) {
    uint32_t u;
    float f, back;
    char mine[32], theirs[32];
    int n;
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    u = i < 300000 ? (uint32_t)(seed >> 32) : (uint32_t)(i - 300000) << 23 | (i & 1 ? 0x7fffffu : 0); /* edges: 2^e, 2^(e+1) - ulp */
    memcpy(&f, &u, sizeof f);
    if (!hk_is_finitef(f) || f == 0) continue;
    n = tr__pw_f9(mine, f);
    mine[n] = 0;
    back = strtof(mine, NULL);
    if (memcmp(&back, &f, sizeof f)) fail_msg("%s reads back as %.9g, not %.9g", mine, (double)back, (double)f);
    snprintf(theirs, sizeof theirs, "%.9g", (double)f);
    if (fabsf(f) > 1e-14f && fabsf(f) < 1e31f) {
      if (strcmp(mine, theirs)) fail_msg("%s, printf's %s", mine, theirs);
      exact++;
    }
  }
  assert_true(exact > 100000);
}

static int for_python(int argc, char **argv) {
  static const char *const spec[] = {
    "prediction_writer(dirpath=%s, format=safetensors, write_interval=batch_and_epoch)",
    "prediction_writer(dirpath=%s, format=csv, write_interval=epoch)",
    "prediction_writer(dirpath=%s, format=jsonl, write_interval=batch)",
  };
  char s[4400];
  int i;
  tr_trainer t;
  if (argc != 3 || strcmp(argv[1], "--write")) { fprintf(stderr, "usage: %s [--write DIR]\n", argv[0]); return 2; }
  for (i = 0; i < 3; i++) {
    tr_desc d;
    memset(&d, 0, sizeof d);
    d.model.params = P; d.model.grads = G; d.model.n_params = 2;
    d.model.forward = fwd; d.model.predict = predict;
    d.log = stderr;
    g_mode = 5;
    memset(&g_data, 0, sizeof g_data);
    g_data.count = count;
    g_data.get = get;
    snprintf(s, sizeof s, spec[i], argv[2]);
    if (tr_init(&t, &d) || hk_spec_apply(t.reg, s) || tr_predict(&t, &g_data, 0)) { fprintf(stderr, "%s\n", tr_error(&t)); return 1; }
    tr_free(&t);
  }
  return 0;
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_formats_intervals),
    cmocka_unit_test(test_own_loop),
    cmocka_unit_test(test_bad_outputs),
    cmocka_unit_test(test_foreign_file),
    cmocka_unit_test(test_readonly_dir),
    cmocka_unit_test(test_default_dir),
    cmocka_unit_test(test_resumed_run_takes_back),
    cmocka_unit_test(test_float_text),
  };
  if (argc > 1) return for_python(argc, argv);
  return run_tests_in_dir(tests, "test_predwriter", g_root);
}
