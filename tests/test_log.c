/* tests/test_log.c - train.h's loggers, progress bar and plots (the LOGGERS AND PROGRESS BAR section).

   cmocka tests: CRC-32C against the published vectors and TensorBoard's golden records; the record
   API; on_log hooks that add, change and drop metrics; csv in Lightning's layout (columns, steps,
   empty cells, versions, hparams.yaml, a new column mid-run); jsonl parsed back; tensorboard records
   walked and checksummed; the plot and tr_plot_csv; tqdm's line; errors (unwritable directory, full
   disk) reported once without stopping training, or failing it with fail_on_error; rank 1 writes
   nothing; bad parameters. Issue 18: links, FIFOs and device nodes planted where the loggers, the plot
   and tr_save write are never followed or replaced; 12 processes started together get 12 version
   directories; records of any size; names that are not UTF-8; a full disk (a 64 KiB tmpfs, mounted
   when running as root) leaves whole records; a new csv column per record costs linear work (bytes
   written, from /proc/self/io); verbose lines in one write each with "[rank: N] "; lr_monitor's
   epoch records; no empty metrics.csv. Issue 28: a file the loggers did not write (a user's, an earlier
   run's: a version given) is never replaced, refused at the logger's open or at the write it would take;
   the bar's stdout a pipe whose reader exited: no SIGPIPE death, the run stops through on_exception.
   Modes used by tests/log.mk's scripts:
     test_log --tb DIR          write a TensorBoard run with known values (tests/tb_read.py checks them)
     test_log --tb-hparams DIR  three fits with the user's hyperparameters (tests/tb_hparams.py checks them)
     test_log --bar             a short fit with the progress bar on stdout (tmux and pipe tests)
     test_log --bar-loop SHAPE US  a loop of its own (steps, epochs, llmc) with the bar, values known
     test_log --crash DIR       log every step forever, slowly (killed with -9 by the crash test)
     test_log --print           tr_print and tr_print_all from every rank (under mpirun: tests/log_mpi.sh)
     test_log --plot CSV SVG    tr_plot_csv */
#define _XOPEN_SOURCE 700 /* mknod */
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <time.h>

static char g_root[256];

/* ---- a tiny model: loss = 1 + p0^2 (training), a scripted validation loss ----------------------- */
#define NB 4
typedef struct toy { float p[2], g[2]; tr_trainer *t; int sleep_us; } toy;
static int toy_forward(void *user, void *batch, int training, double *loss) {
  toy *m = (toy *)user;
  (void)batch;
  if (m->sleep_us) { struct timespec ts = { 0, m->sleep_us * 1000L }; nanosleep(&ts, NULL); }
  *loss = training ? 1.0 + (double)m->p[0] * m->p[0] : 0.5 + 0.1 * (double)m->t->epoch;
  return 0;
}
static int toy_backward(void *user, void *batch) { toy *m = (toy *)user; (void)batch; m->g[0] += 2 * m->p[0]; m->g[1] += 0.5f; return 0; }
static int64_t toy_count(void *user) { (void)user; return NB; }
static int64_t toy_count2(void *user) { (void)user; return 2; }
static int toy_get(void *user, int64_t i, void **batch) { (void)i; *batch = user; return 0; }

static void toy_init(tr_trainer *t, toy *m, FILE *log) {
  memset(m, 0, sizeof *m);
  m->p[0] = 1.0f;
  m->t = t;
  assert_int_equal(tr_init(t, &(tr_desc){ .model = { .params = m->p, .grads = m->g, .n_params = 2, .user = m,
                                                     .forward = toy_forward, .backward = toy_backward },
                                          .optim = { .kind = TR_OPTIM_SGD, .lr = 0.1 }, .seed = 7, .log = log }), TR_OK);
}
static tr_err toy_fit(tr_trainer *t, toy *m, int64_t epochs, int64_t every) {
  tr_data train = { .count = toy_count, .get = toy_get, .user = m, .batch_size = 1 };
  tr_data val = { .count = toy_count2, .get = toy_get, .user = m };
  return tr_fit(t, &(tr_config){ .train = &train, .val = &val, .max_epochs = epochs, .log_every_n_steps = every, .no_sigint = 1 });
}

static void subdir(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", g_root, name);
  mkdir(out, 0777);
}
static void assert_file(const char *path, const char *want) {
  char *got = slurp_len(path, NULL);
  if (!got) fail_msg("%s is missing", path);
  if (strcmp(got, want)) fail_msg("%s:\n--- got\n%s--- want\n%s", path, got, want);
  free(got);
}
static void assert_contains(const char *hay, const char *needle) {
  if (!hay || !strstr(hay, needle)) fail_msg("expected \"%s\" in:\n%s", needle, hay ? hay : "(null)");
}

/* ---- CRC-32C ---------------------------------------------------------------------------------- */
static void test_crc32c(void **state) {
  unsigned char z[32], ff[32], up[32], down[32], len24[8] = { 24, 0, 0, 0, 0, 0, 0, 0 };
  int i;
  (void)state;
  for (i = 0; i < 32; i++) { z[i] = 0; ff[i] = 0xFF; up[i] = (unsigned char)i; down[i] = (unsigned char)(31 - i); }
  assert_int_equal(tr_crc32c("123456789", 9), 0xE3069283u);
  assert_int_equal(tr_crc32c_masked("123456789", 9), 0xC78AB0E5u);
  assert_int_equal(tr_crc32c(z, 32), 0x8A9136AAu);
  assert_int_equal(tr_crc32c_masked(z, 32), 0x0FD7FFFAu);
  assert_int_equal(tr_crc32c(ff, 32), 0x62A8AB43u);
  assert_int_equal(tr_crc32c_masked(ff, 32), 0xF909B029u);
  assert_int_equal(tr_crc32c(up, 32), 0x46DD794Eu);
  assert_int_equal(tr_crc32c_masked(up, 32), 0x951F7892u);
  assert_int_equal(tr_crc32c(down, 32), 0x113FDB5Cu);
  assert_int_equal(tr_crc32c_masked(down, 32), 0x593B0D57u);
  assert_int_equal(tr_crc32c("", 0), 0u);
  assert_int_equal(tr_crc32c_masked("", 0), 0xA282EAD8u);
  assert_int_equal(tr_crc32c_masked("\x1a\x11" "CRC test, one two", 19), 0x5794D08Au);
  assert_int_equal(tr_crc32c_masked(len24, 8), 0x224B7FA3u);
}

/* ---- the record API ---------------------------------------------------------------------------- */
static void test_record_api(void **state) {
  static tr_log_record r;
  double v;
  (void)state;
  memset(&r, 0, sizeof r);
  assert_int_equal(tr_log_set(&r, "a", 1), TR_OK);
  assert_int_equal(tr_log_set(&r, "b", 2), TR_OK);
  assert_int_equal(tr_log_set(&r, "a", 3), TR_OK); /* changed in place */
  assert_int_equal(r.n_metrics, 2);
  assert_true(tr_log_get(&r, "a", &v));
  assert_true(v == 3);
  assert_int_equal(tr_log_drop(&r, "a"), 1);
  assert_int_equal(tr_log_drop(&r, "a"), 0);
  assert_false(tr_log_get(&r, "a", &v));
  assert_string_equal(r.metrics[0].name, "b");
  assert_int_equal(tr_log_set(&r, "", 1), TR_ERR_INVALID);
  assert_int_equal(tr_log_set(&r, NULL, 1), TR_ERR_INVALID);
  assert_null(tr_log_current(NULL));
  tr_log_record_free(&r);
  assert_int_equal(r.n_metrics, 0);
}

/* ---- on_log hooks and csv in Lightning's layout ------------------------------------------------ */
static hk_signal edit_record(hk_ctx *ctx, void *user) {
  tr_log_record *r = tr_log_current(ctx);
  (void)user;
  if (!r) return hk_fail(ctx, "no record at on_log");
  if (!strcmp(r->stage, "train")) {
    tr_log_set(r, "train/loss", 100.0 + (double)r->step); /* changed */
    if (r->step >= 5) tr_log_set(r, "extra", 0.25);      /* a column that appears late */
  } else tr_log_drop(r, "val/drop_me");
  return HK_CONTINUE;
}
static hk_signal set_val_metrics(hk_ctx *ctx, void *user) {
  (void)user;
  hk_metric_set(ctx, "val/acc", 0.5 + 0.125 * (double)ctx->epoch);
  hk_metric_set(ctx, "val/drop_me", 1);
  return HK_CONTINUE;
}

static hk_signal request_log(hk_ctx *ctx, void *user) { (void)user; hk_request(ctx, HK_REQUEST_LOG); return HK_CONTINUE; }

static void test_csv_layout(void **state) {
  char dir[300], path[600], *yaml;
  FILE *devnull;
  tr_trainer t;
  toy m;
  hk_handle h;
  const tr_logger_state *st;
  (void)state;
  subdir(dir, sizeof dir, "csv");
  toy_init(&t, &m, NULL);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir }, &h), TR_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_LOG, edit_record, NULL, NULL, NULL), HK_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_VALIDATION_EPOCH_END, set_val_metrics, NULL, NULL, NULL), HK_OK);
  assert_int_equal(hk_spec_apply(t.reg, "early_stopping(monitor=val/loss, patience=100)"), HK_OK);
  assert_int_equal(toy_fit(&t, &m, 2, 3), TR_OK); /* 8 steps: train records at steps 3 and 6 (step 2, 5) */
  st = tr_logger_get(t.reg, h);
  assert_non_null(st);
  snprintf(path, sizeof path, "%s/lightning_logs/version_0", dir);
  assert_string_equal(st->dir, path);
  assert_int_equal(st->records, 4);
  snprintf(path, sizeof path, "%s/lightning_logs/version_0/metrics.csv", dir);
  /* columns sorted, the late "extra" column rewrote the file (the first rows get empty cells);
     val rows carry the last training step; timer's time/train rides with train rows */
  {
    char *csv = slurp_len(path, NULL), *line2;
    assert_non_null(csv);
    assert_string_equal(csv, "epoch,extra,step,train/loss,val/acc,val/loss\n"
                             "0,,2,102,,\n"
                             "0,,3,,0.5,0.5\n"
                             "1,0.25,5,105,,\n"
                             "1,,7,,0.625,0.6\n");
    (void)line2;
    assert_null(strstr(csv, "drop_me"));
    free(csv);
  }
  snprintf(path, sizeof path, "%s/lightning_logs/version_0/hparams.yaml", dir);
  yaml = slurp_len(path, NULL);
  assert_contains(yaml, "accumulate_grad_batches: 1\n");
  assert_contains(yaml, "log_every_n_steps: 3\n");
  assert_contains(yaml, "lr: 0.1\n");
  assert_contains(yaml, "optimizer: sgd\n");
  assert_contains(yaml, "specs:\n- \"early_stopping(monitor=val/loss, patience=100)\"\n");
  assert_true(strstr(yaml, "accumulate") < strstr(yaml, "batch_size")); /* sorted */
  free(yaml);
  tr_free(&t);

  /* a second run gets version_1; two loggers of one trainer share it */
  toy_init(&t, &m, NULL);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir }, &h), TR_OK);
  {
    char spec[700];
    snprintf(spec, sizeof spec, "jsonl(save_dir=\"%s/other\")", dir); /* another base: its own version_0 */
    assert_int_equal(hk_spec_apply(t.reg, spec), HK_OK);
    snprintf(spec, sizeof spec, "jsonl(save_dir=\"%s\")", dir);
    assert_int_equal(hk_spec_apply(t.reg, spec), HK_OK);
  }
  assert_int_equal(toy_fit(&t, &m, 1, 50), TR_OK);
  st = tr_logger_get(t.reg, h);
  assert_contains(st->dir, "lightning_logs/version_1");
  snprintf(path, sizeof path, "%s/lightning_logs/version_1/metrics.jsonl", dir);
  assert_true(access(path, F_OK) == 0);
  snprintf(path, sizeof path, "%s/lightning_logs/version_2", dir);
  assert_true(access(path, F_OK) != 0);
  snprintf(path, sizeof path, "%s/other/lightning_logs/version_0/metrics.jsonl", dir);
  assert_true(access(path, F_OK) == 0);
  tr_free(&t);

  /* a hook asks for a log at step 2 (not due with log_every_n_steps=50): one extra row, at once (and
     the request's line in tr_desc.log, here /dev/null) */
  devnull = fopen("/dev/null", "w");
  toy_init(&t, &m, devnull);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "requested" }, NULL), TR_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_TRAIN_BATCH_END, request_log, NULL, &(hk_opts){ .filter = { .once_at = 2 } }, NULL), HK_OK);
  assert_int_equal(toy_fit(&t, &m, 1, 50), TR_OK);
  snprintf(path, sizeof path, "%s/lightning_logs/requested/metrics.csv", dir);
  assert_file(path, "epoch,step,train/loss,val/loss\n0,1,1.6400000190734865,\n0,3,,0.5\n");
  tr_free(&t);
  fclose(devnull);

  /* a given version and name "" */
  toy_init(&t, &m, NULL);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .name = "", .version = "mine", .flush_every = 100 }, &h), TR_OK);
  assert_int_equal(toy_fit(&t, &m, 1, 1), TR_OK);
  snprintf(path, sizeof path, "%s/mine/metrics.csv", dir);
  assert_file(path, "epoch,step,train/loss,val/loss\n0,0,2,\n0,1,1.6400000190734865,\n0,2,1.4095999816894533,\n"
                    "0,3,1.2621439638671887,\n0,3,,0.5\n");
  tr_free(&t);
}

/* ---- jsonl ------------------------------------------------------------------------------------- */
static hk_signal add_nonfinite(hk_ctx *ctx, void *user) {
  tr_log_record *r = tr_log_current(ctx);
  (void)user;
  tr_log_set(r, "weird \"name\"", NAN);
  tr_log_set(r, "inf", HUGE_VAL);
  return HK_CONTINUE;
}
static void test_jsonl(void **state) {
  char dir[300], path[600], *text;
  tr_trainer t;
  toy m;
  (void)state;
  subdir(dir, sizeof dir, "jsonl");
  toy_init(&t, &m, NULL);
  assert_int_equal(tr_jsonl_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "v" }, NULL), TR_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_LOG, add_nonfinite, NULL, NULL, NULL), HK_OK);
  assert_int_equal(toy_fit(&t, &m, 1, 2), TR_OK);
  snprintf(path, sizeof path, "%s/lightning_logs/v/metrics.jsonl", dir);
  text = slurp_len(path, NULL);
  assert_non_null(text);
  assert_true(strncmp(text, "{\"hparams\":{\"accumulate_grad_batches\":1,\"batch_size\":1,", 52) == 0);
  assert_contains(text, "\"specs\":[]}}\n");
  assert_contains(text, "\n{\"step\":1,\"epoch\":0,\"stage\":\"train\",\"metrics\":{\"train/loss\":1.6400000190734865,"
                        "\"weird \\\"name\\\"\":\"NaN\",\"inf\":\"Infinity\"}}\n");
  assert_contains(text, "{\"step\":3,\"epoch\":0,\"stage\":\"val\",\"metrics\":{\"val/loss\":0.5,");
  free(text);
  tr_free(&t);
}

/* ---- tensorboard: walk the records, check both CRCs, find the values --------------------------- */
static int find_bytes(const unsigned char *p, size_t n, const void *needle, size_t k) {
  size_t i;
  for (i = 0; i + k <= n; i++) if (!memcmp(p + i, needle, k)) return 1;
  return 0;
}
static hk_signal add_histogram(hk_ctx *ctx, void *user) {
  static const float v[5] = { -1, 0, 0.5f, 1, 2 };
  (void)user;
  return tr_log_histogram(ctx, "weights", v, 5) == TR_OK ? HK_CONTINUE : hk_fail(ctx, "tr_log_histogram failed");
}
/* tr_log_histogram outside on_log (where a gradient monitor sees the gradients) waits for the next
   record: it rides with that one only. */
static hk_signal hist_from_grads(hk_ctx *ctx, void *user) {
  int *due = (int *)user;
  due[ctx->global_step] = tr_log_due(ctx);
  if (ctx->global_step != 1) return HK_CONTINUE;
  return tr_log_histogram(ctx, "grads", ctx->grads[0].data, ctx->grads[0].count) == TR_OK ? HK_CONTINUE : hk_fail(ctx, "histogram refused");
}
static hk_signal count_hists(hk_ctx *ctx, void *user) {
  tr_log_record *r = tr_log_current(ctx);
  int *seen = (int *)user;
  if (r->n_histograms == 1 && !strcmp(r->histograms[0].tag, "grads") && r->histograms[0].num == 2) seen[0]++;
  else if (r->n_histograms == 0) seen[1]++;
  else seen[2]++;
  return HK_CONTINUE;
}
static void test_histogram_waits(void **state) {
  tr_trainer t;
  toy m;
  int seen[3] = { 0, 0, 0 }, due[NB] = { 9, 9, 9, 9 };
  hk_ctx foreign;
  (void)state;
  toy_init(&t, &m, NULL);
  /* at the 2nd step only, before the optimizer step; records every 2 steps: after steps 2 and 4 */
  assert_int_equal(hk_on(t.reg, HK_ON_BEFORE_OPTIMIZER_STEP, hist_from_grads, due, NULL, NULL), HK_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_LOG, count_hists, seen, NULL, NULL), HK_OK);
  assert_int_equal(toy_fit(&t, &m, 1, 2), TR_OK);
  assert_int_equal(seen[0], 1); /* the record of step 2 carried it */
  assert_int_equal(seen[1], 2); /* the record of step 4 and the validation's did not */
  assert_int_equal(seen[2], 0);
  assert_int_equal(due[0], 0); /* tr_log_due: the 2nd and 4th steps are followed by a record */
  assert_int_equal(due[1], 1);
  assert_int_equal(due[2], 0);
  assert_int_equal(due[3], 1);
  assert_int_equal(tr_log_due(&t.ctx), 0); /* outside a fit */
  memset(&foreign, 0, sizeof foreign); /* not at on_log, and not train.h's trainer: refused */
  assert_int_equal(tr_log_histogram(&foreign, "x", m.g, 2), TR_ERR_INVALID);
  tr_free(&t);
}

/* gradient_monitor's histogram reaches the loggers: 40 bins merged into 20 buckets, with the record
   of the step it was taken at; its metrics (grad_2.0_norm_total) ride with training records too. */
static hk_signal gm_seen(hk_ctx *ctx, void *user) {
  tr_log_record *r = tr_log_current(ctx);
  int *seen = (int *)user;
  double v;
  if (strcmp(r->stage, "train")) return HK_CONTINUE;
  if (r->n_histograms == 1 && !strcmp(r->histograms[0].tag, "gradients") && r->histograms[0].n_buckets == 20 &&
      r->histograms[0].num == 2 && tr_log_get(r, "grad_2.0_norm_total", &v) && v > 0) seen[0]++;
  else seen[1]++;
  return HK_CONTINUE;
}
static void test_gradient_monitor_histogram(void **state) {
  tr_trainer t;
  toy m;
  int seen[2] = { 0, 0 };
  (void)state;
  toy_init(&t, &m, NULL);
  assert_int_equal(hk_spec_apply(t.reg, "gradient_monitor(log_frequency=2, histogram_bins=40)"), HK_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_LOG, gm_seen, seen, NULL, NULL), HK_OK);
  assert_int_equal(toy_fit(&t, &m, 1, 2), TR_OK);
  assert_int_equal(seen[0], 2); /* the records of steps 2 and 4 */
  assert_int_equal(seen[1], 0);
  tr_free(&t);
}

/* A histogram counted elsewhere (a monitor's): 70 bins merge into 24 buckets of 3 (the last of 1). */
static void test_histogram_bins(void **state) {
  static tr_log_record r;
  double edges[71];
  int64_t counts[70];
  hk_ctx ctx;
  const tr_log_histogram_data *h;
  int b;
  double total = 0;
  (void)state;
  memset(&r, 0, sizeof r);
  memset(&ctx, 0, sizeof ctx);
  ctx.event = HK_ON_LOG;
  ctx.outputs = &r;
  for (b = 0; b <= 70; b++) edges[b] = -3.5 + 0.1 * b;
  for (b = 0; b < 70; b++) counts[b] = b % 5;
  assert_int_equal(tr_log_histogram_bins(&ctx, "grads", 70, edges, counts, 1.5, 20), TR_OK);
  assert_int_equal(r.n_histograms, 1);
  h = &r.histograms[0];
  assert_int_equal(h->n_buckets, 24);
  assert_true(h->min == edges[0] && h->max == edges[70] && h->sum == 1.5 && h->sum_squares == 20);
  assert_true(h->limit[0] == edges[3] && h->count[0] == 0 + 1 + 2);
  assert_true(h->limit[23] == edges[70] && h->count[23] == 69 % 5);
  for (b = 0; b < h->n_buckets; b++) total += h->count[b];
  assert_true(total == h->num && h->num == 140);
  /* few bins are kept as they are; a tag given again replaces its histogram */
  assert_int_equal(tr_log_histogram_bins(&ctx, "grads", 2, edges, counts + 1, 0, 0), TR_OK);
  assert_int_equal(r.n_histograms, 1);
  assert_int_equal(h->n_buckets, 2);
  assert_true(h->count[0] == 1 && h->count[1] == 2 && h->limit[1] == edges[2]);
  /* bad input */
  assert_int_equal(tr_log_histogram_bins(&ctx, "g", 0, edges, counts, 0, 0), TR_ERR_INVALID);
  edges[5] = edges[4] - 1;
  assert_int_equal(tr_log_histogram_bins(&ctx, "g", 10, edges, counts, 0, 0), TR_ERR_INVALID);
  edges[5] = NAN;
  assert_int_equal(tr_log_histogram_bins(&ctx, "g", 10, edges, counts, 0, 0), TR_ERR_INVALID);
  edges[5] = edges[4] + 0.1;
  counts[2] = -1;
  assert_int_equal(tr_log_histogram_bins(&ctx, "g", 10, edges, counts, 0, 0), TR_ERR_INVALID);
  assert_int_equal(tr_log_histogram_bins(&ctx, "", 10, edges, counts, 0, 0), TR_ERR_INVALID);
  assert_int_equal(r.n_histograms, 1);
}

static void test_tensorboard(void **state) {
  char dir[300], path[700];
  tr_trainer t;
  toy m;
  hk_handle h;
  const tr_logger_state *st;
  unsigned char *p;
  size_t n, pos = 0;
  int records = 0, hist = 0;
  float loss0 = 2.0f;
  (void)state;
  subdir(dir, sizeof dir, "tb");
  toy_init(&t, &m, NULL);
  assert_int_equal(tr_tensorboard_logger(t.reg, &(tr_logger_desc){ .save_dir = dir }, &h), TR_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_LOG, add_histogram, NULL, NULL, NULL), HK_OK);
  assert_int_equal(toy_fit(&t, &m, 1, 1), TR_OK);
  st = tr_logger_get(t.reg, h);
  assert_contains(st->path, "/lightning_logs/version_0/events.out.tfevents.");
  snprintf(path, sizeof path, "%s", st->path);
  p = (unsigned char *)slurp_len(path, &n);
  assert_non_null(p);
  while (pos < n) {
    uint64_t len = 0;
    uint32_t c1, c2;
    int k;
    assert_true(pos + 12 <= n);
    for (k = 7; k >= 0; k--) len = len << 8 | p[pos + k];
    c1 = (uint32_t)p[pos + 8] | (uint32_t)p[pos + 9] << 8 | (uint32_t)p[pos + 10] << 16 | (uint32_t)p[pos + 11] << 24;
    assert_int_equal(c1, tr_crc32c_masked(p + pos, 8));
    assert_true(pos + 16 + len <= n);
    c2 = (uint32_t)p[pos + 12 + len] | (uint32_t)p[pos + 13 + len] << 8 | (uint32_t)p[pos + 14 + len] << 16 | (uint32_t)p[pos + 15 + len] << 24;
    assert_int_equal(c2, tr_crc32c_masked(p + pos + 12, (size_t)len));
    if (records == 0) assert_true(find_bytes(p + pos + 12, (size_t)len, "\x1a\x0d" "brain.Event:2", 15));
    if (records == 1) assert_true(find_bytes(p + pos + 12, (size_t)len, "| log_every_n_steps | 1 |", 25));
    if (records == 1) assert_true(find_bytes(p + pos + 12, (size_t)len, "_hparams_/session_start_info", 28)); /* HParams tab */
    if (pos + 16 + len == n) /* the last: the fit's end, status 1 (success) */
      assert_true(find_bytes(p + pos + 12, (size_t)len, "_hparams_/session_end_info", 26) &&
                  find_bytes(p + pos + 12, (size_t)len, "\x22\x0b\x08\x01\x11", 5));
    if (find_bytes(p + pos + 12, (size_t)len, "\x0a\x07weights", 9)) hist++;
    records++;
    pos += 16 + (size_t)len;
  }
  assert_int_equal(records, 2 + 4 + 1 + 1); /* file_version, hparams, 4 train records, 1 validation, the fit's end */
  assert_int_equal(hist, 5);            /* every record carried the histogram added at on_log */
  { /* the first training record: Value{tag "train/loss", simple_value 2.0f} */
    unsigned char want[18] = { 0x0a, 0x0a, 't', 'r', 'a', 'i', 'n', '/', 'l', 'o', 's', 's', 0x15 };
    memcpy(want + 13, &loss0, 4);
    assert_true(find_bytes(p, n, want, 17));
  }
  free(p);
  tr_free(&t);
}

/* ---- plot -------------------------------------------------------------------------------------- */
static void test_plot(void **state) {
  char dir[300], csv[600], svg[600], why[600], *text;
  tr_trainer t;
  toy m;
  hk_handle h;
  FILE *f;
  (void)state;
  subdir(dir, sizeof dir, "plot");
  toy_init(&t, &m, NULL);
  assert_int_equal(tr_plot(t.reg, &(tr_plot_desc){ .dir = { .save_dir = dir }, .title = "toy <run>" }, &h), TR_OK);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir }, NULL), TR_OK);
  assert_int_equal(toy_fit(&t, &m, 3, 1), TR_OK);
  assert_string_equal(tr_logger_get(t.reg, h)->path, strcat(strcpy(svg, dir), "/lightning_logs/version_0/metrics.svg"));
  text = slurp_len(svg, NULL);
  assert_non_null(text);
  assert_contains(text, "<svg xmlns=\"http://www.w3.org/2000/svg\"");
  assert_contains(text, "toy &lt;run&gt;");
  assert_contains(text, ">train/loss</text>");
  assert_contains(text, ">val/loss</text>");
  assert_contains(text, "<polyline");
  assert_contains(text, "<desc>");
  assert_contains(text, "log_every_n_steps: 1\n");  /* the hparams */
  free(text);
  tr_free(&t);

  snprintf(csv, sizeof csv, "%s/lightning_logs/version_0/metrics.csv", dir);
  snprintf(svg, sizeof svg, "%s/from_csv.svg", dir);
  assert_int_equal(tr_plot_csv(csv, svg, "val/loss", why, sizeof why), TR_OK);
  text = slurp_len(svg, NULL);
  assert_contains(text, ">val/loss</text>");
  assert_null(strstr(text, ">train/loss</text>"));
  free(text);
  /* bad input */
  assert_int_equal(tr_plot_csv("/nonexistent/metrics.csv", svg, NULL, why, sizeof why), TR_ERR_IO);
  assert_contains(why, "cannot read /nonexistent/metrics.csv");
  assert_int_equal(tr_plot_csv(csv, svg, "nothing_like_this", why, sizeof why), TR_ERR_INVALID);
  assert_contains(why, "no column to plot");
  snprintf(csv, sizeof csv, "%s/bad.csv", dir);
  f = fopen(csv, "w");
  fputs("epoch,loss\n0,1\n", f);
  fclose(f);
  assert_int_equal(tr_plot_csv(csv, svg, NULL, why, sizeof why), TR_ERR_INVALID);
  assert_contains(why, "no \"step\" column");
  f = fopen(csv, "w");
  fputs("step,loss\n0,1\n1,2,3\n", f);
  fclose(f);
  assert_int_equal(tr_plot_csv(csv, svg, NULL, why, sizeof why), TR_ERR_INVALID);
  assert_contains(why, ":3: 3 cells, the header has 2");
  assert_int_equal(tr_plot_csv(NULL, svg, NULL, NULL, 0), TR_ERR_INVALID);
}

/* ---- tqdm's line ------------------------------------------------------------------------------- */
static void test_bar_format(void **state) {
  char b[512];
  (void)state;
  /* Lightning's own line (loggers.md section 3), postfix ours */
  tr_bar_format(b, sizeof b, "Epoch 0", 1, 4, 1 / 289.78, "loss=2.01", 0, 0);
  assert_string_equal(b, "Epoch 0:  25%|\xe2\x96\x88\xe2\x96\x88\xe2\x96\x8c       | 1/4 [00:00<00:00, 289.78it/s, loss=2.01]");
  tr_bar_format(b, sizeof b, "Epoch 3", 27, 60, 27 / 25.3, NULL, 0, 1);
  assert_string_equal(b, "Epoch 3:  45%|####5     | 27/60 [00:01<00:01, 25.30it/s]");
  tr_bar_format(b, sizeof b, "Epoch 1", 3, 10, 37, NULL, 60, 1); /* slower than 1/s: s/it; the bar fills the width */
  assert_string_equal(b, "Epoch 1:  30%|####5          | 3/10 [00:37<01:26, 12.33s/it]");
  assert_int_equal(strlen(b), 60);
  tr_bar_format(b, sizeof b, "Predicting", 12, 0, 4000, NULL, 0, 0);
  assert_string_equal(b, "Predicting: 12it [1:06:40, 333.33s/it]");
  tr_bar_format(b, sizeof b, "x", 0, 5, 0, NULL, 0, 1);
  assert_string_equal(b, "x:   0%|          | 0/5 [00:00<?, ?it/s]");
  assert_int_equal(tr_bar_format(b, 8, "Epoch 0", 1, 4, 1, NULL, 0, 0), 7); /* clipped */
  assert_int_equal(tr_bar_format(b, 20, "Predicting", 12, 0, 4000, NULL, 0, 0), 16); /* a part that does not fit goes whole */
  assert_string_equal(b, "Predicting: 12it");
  { /* a desc over 64 bytes: its start (whole characters) and "...", then the rest of the line as always */
    char desc[141], want[200];
    int i;
    for (i = 0; i < 70; i++) memcpy(desc + 2 * i, "\xc3\xa9", 2); /* 70 two-byte characters */
    desc[140] = 0;
    memcpy(want, desc, 60); /* 30 of them: 61 bytes would cut the 31st */
    strcpy(want + 60, "...: 12it [1:06:40, 333.33s/it]");
    tr_bar_format(b, sizeof b, desc, 12, 0, 4000, NULL, 0, 0);
    assert_string_equal(b, want);
    memcpy(want, desc, 60);
    strcpy(want + 60, "...:  25%|##5       | 1/4 [00:01<00:03, 1.00it/s]");
    tr_bar_format(b, sizeof b, desc, 1, 4, 1, NULL, 0, 1);
    assert_string_equal(b, want);
  }
  /* a narrow line: whole fields go (the last first), then the rate, then the times, before the bar has
     fewer than 10 cells; a number is never cut (issue 38: "val/loss=0.0124" was shown for 0.01246) */
  {
    static const struct { int width; const char *want; } narrow[] = {
      { 100, "Epoch 3:  45%|####5     | 27/60 [00:01<00:01, 25.30it/s, loss=0.2312, val/loss=0.01246, val/acc=0.5]" },
      { 99, "Epoch 3:  45%|#########9            | 27/60 [00:01<00:01, 25.30it/s, loss=0.2312, val/loss=0.01246]" },
      { 80, "Epoch 3:  45%|#########4           | 27/60 [00:01<00:01, 25.30it/s, loss=0.2312]" },
      { 60, "Epoch 3:  45%|######3       | 27/60 [00:01<00:01, 25.30it/s]" },
      { 50, "Epoch 3:  45%|######7        | 27/60 [00:01<00:01]" },
      { 40, "Epoch 3:  45%|########5          | 27/60" },
      { 24, "Epoch 3:  45%|#3 | 27/60" }, /* below 10 cells only when nothing is left to give up */
    };
    size_t i;
    for (i = 0; i < sizeof narrow / sizeof narrow[0]; i++) {
      assert_int_equal(tr_bar_format(b, sizeof b, "Epoch 3", 27, 60, 27 / 25.3, "loss=0.2312, val/loss=0.01246, val/acc=0.5",
                                     narrow[i].width, 1), strlen(narrow[i].want));
      assert_string_equal(b, narrow[i].want);
    }
    tr_bar_format(b, sizeof b, "Predicting", 12, 0, 4000, "loss=0.5", 30, 0); /* no total, no bar: the same order */
    assert_string_equal(b, "Predicting: 12it [1:06:40]");
  }
}

/* ---- the bar as a callback: lines into a file, and a terminal's redraws --------------------------- */
static int count_lines(const char *s) { int n = 0; for (; *s; s++) n += *s == '\n'; return n; }
static int count_str(const char *s, const char *what) { int n = 0; for (; (s = strstr(s, what)) != NULL; s++) n++; return n; }

static void test_bar_callback(void **state) {
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  tr_trainer t;
  toy m;
  (void)state;
  toy_init(&t, &m, NULL);
  assert_int_equal(tr_progress_bar(t.reg, &(tr_progress_bar_desc){ .out = out, .mode = TR_BAR_LINES, .ascii = 1 }, NULL), TR_OK);
  assert_int_equal(toy_fit(&t, &m, 2, 2), TR_OK);
  assert_int_equal(tr_validate(&t, &(tr_data){ .count = toy_count2, .get = toy_get, .user = &m }, 0, NULL), TR_OK);
  fflush(out);
  assert_null(strchr(text, '\r'));
  assert_null(strchr(text, '\033'));
  /* a log reader's lines: the sanity check once, one line per epoch carrying its validation's metrics,
     one for the evaluation run after the fit; nothing else */
  if (strncmp(text, "Sanity Checking: 100%|##########| 2/2 [00:00<", 45)) fail_msg("%s", text); /* the rate may be ? */
  assert_int_equal(count_lines(text), 4);
  assert_contains(text, "]\nEpoch 0: 100%|##########| 4/4 [");
  assert_contains(text, "loss=1.262, val/loss=0.5]\nEpoch 1: 100%|##########| 4/4 [");
  assert_contains(text, "loss=1.044, val/loss=0.6]\nValidation: 100%|##########| 2/2 [00:00<");  /* tr_validate's line */
  assert_int_equal(count_str(text, "Sanity Checking"), 1);
  tr_free(&t);
  fclose(out);
  free(text);

  /* a terminal: \r redraws padded over the last text, the validation line below, erased at its end */
  text = NULL;
  out = open_memstream(&text, &len);
  toy_init(&t, &m, NULL);
  assert_int_equal(tr_progress_bar(t.reg, &(tr_progress_bar_desc){ .out = out, .mode = TR_BAR_TTY, .width = 60, .refresh_seconds = 1e-9 }, NULL), TR_OK);
  assert_int_equal(toy_fit(&t, &m, 1, 2), TR_OK);
  fflush(out);
  assert_contains(text, "\r\033[KSanity Checking: "); /* shown at its first due redraw (50% or, same microsecond, 100%) */
  assert_contains(text, "\r\033[K\r\033[KEpoch 0:   0%|"); /* the sanity check's line is erased */
  assert_contains(text, "\n\r\033[KValidation: ");
  assert_contains(text, "\r\033[K\033[A\r\033[K\r\033[KEpoch 0: 100%|");
  assert_int_equal(text[len - 1], '\n');         /* on_train_end leaves the line */
  assert_null(strstr(text, "\n\n"));
  { /* every line drawn, postfix and all, is cut to the width: a terminal never wraps it */
    const char *p = text, *e;
    for (; (p = strstr(p, "\033[K")) != NULL; p = e) {
      size_t cols = 0;
      p += 3;
      for (e = p; *e && *e != '\r' && *e != '\n' && *e != '\033'; e++) cols += ((unsigned char)*e & 0xC0) != 0x80;
      if (cols > 60) fail_msg("a line of %zu columns: %.*s", cols, (int)(e - p), p);
    }
  }
  tr_free(&t);
  fclose(out);
  free(text);
}

/* ---- the bar's loss: the latest training batch's at each redraw (issue 28, item 15) ------------------
   Lightning's bar shows the loss of the step it draws; the record's train/loss is log_every_n_steps
   old (the bar ended at 4.603 while the last step's loss was 4.688). Losses of the toy, batch by batch:
   2, 1.64, 1.41, 1.262 (epoch 0), 1.168, 1.107, 1.069, 1.044 (epoch 1). A step loop of its own gives its
   validation bar a total through tr_run.eval_batches. */
static void assert_drawn_with(const char *text, const char *count, const char *loss) { /* a line at count ends with loss */
  const char *p = strstr(text, count), *end;
  if (!p) fail_msg("no line at %s in:\n%s", count, text);
  end = strchr(p, ']');
  if (!end || (size_t)(end - p) < strlen(loss) || strncmp(end - strlen(loss), loss, strlen(loss)))
    fail_msg("the line at %s does not end with \"%s]\": %.*s", count, loss, end ? (int)(end - p + 1) : 40, p);
}
static void test_bar_latest_loss(void **state) {
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  tr_trainer t;
  toy m;
  (void)state;
  /* lines: each epoch's line carries its last batch's loss; records every 3 steps (steps 2 and 5) */
  toy_init(&t, &m, NULL);
  assert_int_equal(tr_progress_bar(t.reg, &(tr_progress_bar_desc){ .out = out, .mode = TR_BAR_LINES, .ascii = 1 }, NULL), TR_OK);
  assert_int_equal(toy_fit(&t, &m, 2, 3), TR_OK);
  fflush(out);
  assert_contains(text, "loss=1.262, val/loss=0.5]\nEpoch 1: 100%|##########| 4/4 [");
  assert_contains(text, "loss=1.044, val/loss=0.6]\n");
  assert_null(strstr(text, "loss=1.41,")); /* step 2's record */
  tr_free(&t);
  fclose(out);
  free(text);

  /* a terminal redrawn at every batch: each redraw the batch's own loss, no record in the epoch */
  text = NULL;
  out = open_memstream(&text, &len);
  toy_init(&t, &m, NULL);
  assert_int_equal(tr_progress_bar(t.reg, &(tr_progress_bar_desc){ .out = out, .mode = TR_BAR_TTY, .width = 200, .ascii = 1,
                                                                     .refresh_seconds = 1e-9 }, NULL), TR_OK);
  assert_int_equal(toy_fit(&t, &m, 1, 50), TR_OK);
  fflush(out);
  assert_drawn_with(text, "| 1/4 [", ", loss=2");
  assert_drawn_with(text, "| 2/4 [", ", loss=1.64");
  assert_drawn_with(text, "| 3/4 [", ", loss=1.41");
  assert_drawn_with(text, "| 4/4 [", ", loss=1.262");
  tr_free(&t);
  fclose(out);
  free(text);

  { /* a step loop of its own: the training line's loss is the last step's; the validation bar's total is
       tr_run.eval_batches, set by the loop before on_validation_start */
    hk_registry *reg = hk_create(NULL);
    hk_ctx c;
    hk_flow flow;
    int64_t i, b;
    text = NULL;
    out = open_memstream(&text, &len);
    memset(&c, 0, sizeof c);
    memset(&flow, 0, sizeof flow);
    assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = 6, .log_every_n_steps = 4, .no_signals = 1 }), TR_OK);
    assert_int_equal(tr_progress_bar(reg, &(tr_progress_bar_desc){ .out = out, .mode = TR_BAR_LINES, .ascii = 1 }, NULL), TR_OK);
    tr_run_get(reg)->eval_batches = 3;
    assert_int_equal(tr_run_start(reg, &c, NULL), TR_OK);
    c.stage = HK_STAGE_FIT;
    for (i = 0; i < 6; i++) {
      c.batch_idx = i;
      HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, &c, &flow);
      c.loss = 10.0 - (double)i; /* 10, 9, ... 5 */
      c.global_step++;
      HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &c, &flow);
      (void)tr_run_batch_end(reg, &c, &flow);
      if (c.global_step % 3 == 0) { /* a validation of 3 batches */
        HK_FIRE_FLOW(reg, HK_ON_VALIDATION_START, &c, &flow);
        for (b = 0; b < 3; b++) {
          c.batch_idx = b;
          HK_FIRE_FLOW(reg, HK_ON_VALIDATION_BATCH_END, &c, &flow);
        }
        hk_metric_set(&c, "val/loss", 0.5);
        tr_run_log(reg, &c, "val");
        HK_FIRE_FLOW(reg, HK_ON_VALIDATION_END, &c, &flow);
        c.batch_idx = i;
      }
      hk_flow_clear(&flow, HK_FLOW_BATCH_SIGNALS);
    }
    assert_int_equal(tr_run_finish(reg, &c, TR_OK), TR_OK);
    fflush(out);
    /* a step loop's validation ends its "epoch": the training line at that step with its metrics (issue 38:
       "Validation: 100%" lines said nothing of the run's progress), and no line at the end repeats it */
    assert_int_equal(count_str(text, "Validation"), 0);
    assert_int_equal(count_lines(text), 2);
    assert_contains(text, "Training:  50%|#####     | 3/6 [");
    assert_drawn_with(text, "| 3/6 [", ", loss=8, val/loss=0.5");
    assert_contains(text, "Training: 100%|##########| 6/6 [");
    assert_drawn_with(text, "| 6/6 [", ", loss=5, val/loss=0.5"); /* step 4's record said 7 */
    hk_ctx_free(&c);
    hk_destroy(reg);
    fclose(out);
    free(text);
  }
}

/* ---- what happened, said by default above the live bar: early stopping's stop, a resume's restart --- */
static void test_said_above_bar(void **state) {
  char dir[300], ck[400], *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  tr_trainer t;
  toy m;
  tr_data train = { .count = toy_count, .get = toy_get, .user = &m, .batch_size = 1 };
  tr_data val = { .count = toy_count2, .get = toy_get, .user = &m };
  (void)state;
  subdir(dir, sizeof dir, "said");
  snprintf(ck, sizeof ck, "%s/last.ckpt", dir);
  /* val/loss grows each epoch (0.5, 0.6, ...): patience 1 stops after epoch 1; the run's log and the bar
     share a stream, as stderr and stdout share a terminal */
  toy_init(&t, &m, out);
  assert_int_equal(tr_progress_bar(t.reg, &(tr_progress_bar_desc){ .out = out, .mode = TR_BAR_TTY, .width = 60,
                                                                     .refresh_seconds = 1e-9 }, NULL), TR_OK);
  assert_int_equal(hk_spec_apply(t.reg, "early_stopping(monitor=val/loss, patience=1)"), HK_OK);
  assert_int_equal(toy_fit(&t, &m, 5, 2), TR_OK);
  assert_int_equal(t.epoch, 2);
  assert_int_equal(tr_save(&t, ck), TR_OK);
  fflush(out);
  /* the bar's line erased, the line, the bar drawn again below it */
  assert_contains(text, "\r\033[Kearly_stopping: Monitored metric val/loss did not improve in the last 1 records. "
                        "Best score: 0.500. Signaling Trainer to stop.\n\r\033[KEpoch 1: 100%|");
  assert_int_equal(count_str(text, "Monitored metric"), 1);
  tr_free(&t);

  /* a resume says where it restarted; the bar's line is not live yet: a plain line */
  fclose(out);
  free(text);
  text = NULL;
  out = open_memstream(&text, &len);
  toy_init(&t, &m, out);
  assert_int_equal(tr_progress_bar(t.reg, &(tr_progress_bar_desc){ .out = out, .mode = TR_BAR_TTY, .width = 60,
                                                                     .refresh_seconds = 1e-9 }, NULL), TR_OK);
  assert_int_equal(tr_fit(&t, &(tr_config){ .train = &train, .val = &val, .max_epochs = 3, .resume_from = ck, .no_sigint = 1 }), TR_OK);
  fflush(out);
  if (!strstr(text, "Restored all states from the checkpoint at ") || !strstr(text, "last.ckpt: epoch 2, global step 8, batch 0 of the epoch\n"))
    fail_msg("no resume line in: %s", text);
  tr_free(&t);

  /* both switched off: nothing said */
  fclose(out);
  free(text);
  text = NULL;
  out = open_memstream(&text, &len);
  toy_init(&t, &m, out);
  assert_int_equal(tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/loss", .patience = 1, .log_stop = TR_NO }, NULL), TR_OK);
  assert_int_equal(toy_fit(&t, &m, 5, 2), TR_OK);
  assert_int_equal(t.epoch, 2);
  assert_int_equal(tr_fit(&t, &(tr_config){ .train = &train, .val = &val, .max_epochs = 3, .resume_from = ck, .no_sigint = 1,
                                            .no_resume_message = 1 }), TR_OK);
  fflush(out);
  assert_null(strstr(text, "Monitored metric"));
  assert_null(strstr(text, "Restored"));
  tr_free(&t);
  fclose(out);
  free(text);
}

/* ---- the bar's stream closed under it (issue 28, item 11) ------------------------------------------
   stdout a pipe whose reader has exited (prog | head -1): the bar's next write would have killed the
   process with SIGPIPE (exit 141), on_exception never run. Now the write fails with EPIPE (SIGPIPE
   ignored around it), the run stops through on_exception with the bar's message, a tr_print after it
   is dropped, and the process's SIGPIPE disposition is as it was. A process that ignores SIGPIPE or
   handles it itself (its handler and flags kept) loses the bar alone, said once on stderr, as any other
   write error (/dev/full): training goes on. In child processes (the unfixed bar kills them). */
static volatile sig_atomic_t g_pipe_handled;
static void on_sigpipe(int sig, siginfo_t *info, void *uc) { (void)sig; (void)info; (void)uc; g_pipe_handled++; }
static char g_pipe_abort[400];
static hk_signal pipe_on_exception(hk_ctx *ctx, void *user) {
  (void)user;
  snprintf(g_pipe_abort, sizeof g_pipe_abort, "%s", ctx->abort_reason ? ctx->abort_reason : "(none)");
  tr_print(ctx->reg, "said after the pipe closed"); /* nothing reads it: dropped, no SIGPIPE */
  return HK_CONTINUE;
}
static hk_signal pipe_print(hk_ctx *ctx, void *user) { /* tr_print at every step: dropped once the pipe is gone */
  (void)user;
  tr_print(ctx->reg, "step %lld", (long long)ctx->global_step);
  return HK_CONTINUE;
}
/* disposition 0: SIG_DFL (the run stops), 1: a handler of its own, 2: SIG_IGN (training goes on). 0, or
   the first check that failed. */
static int pipe_child(int tty, int disposition, int unbuffered, const char *err_path) {
  tr_trainer t;
  toy m;
  struct sigaction sa, now;
  int fds[2];
  tr_err e;
  if (pipe(fds) != 0 || dup2(fds[1], STDOUT_FILENO) < 0) return 10;
  close(fds[0]); /* the reader is gone */
  close(fds[1]);
  if (!freopen(err_path, "w", stderr)) return 9;
  if (unbuffered && setvbuf(stdout, NULL, _IONBF, 0) != 0) return 8; /* stderr's way: the write fails, not the flush */
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  if (disposition == 1) { sa.sa_sigaction = on_sigpipe; sa.sa_flags = SA_SIGINFO | SA_RESTART; }
  else sa.sa_handler = disposition ? SIG_IGN : SIG_DFL;
  if (sigaction(SIGPIPE, &sa, NULL) != 0) return 11;
  toy_init(&t, &m, NULL);
  if (tr_progress_bar(t.reg, &(tr_progress_bar_desc){ .mode = tty ? TR_BAR_TTY : TR_BAR_LINES, .refresh_seconds = 1e-9,
                                                      .width = 60 }, NULL) != TR_OK) return 12;
  if (hk_on(t.reg, HK_ON_EXCEPTION, pipe_on_exception, NULL, NULL, NULL) != HK_OK) return 13;
  if (disposition && hk_on(t.reg, HK_ON_TRAIN_BATCH_END, pipe_print, NULL, NULL, NULL) != HK_OK) return 13;
  e = toy_fit(&t, &m, 3, 1);
  if (disposition == 0) {
    if (e != TR_ERR_HOOK) { fprintf(stderr, "tr_fit: %s: %s\n", tr_err_name(e), tr_error(&t)); return 14; }
    if (!strstr(tr_error(&t), "callback 'progress_bar' failed in ") ||
        !strstr(tr_error(&t), ": stdout was closed (Broken pipe: its reader exited, as in prog | head -1)")) {
      fprintf(stderr, "%s\n", tr_error(&t));
      return 15;
    }
    if (!strstr(g_pipe_abort, "stdout was closed")) { fprintf(stderr, "on_exception: %s\n", g_pipe_abort); return 16; }
    if (t.epoch != 0) return 17; /* it stopped at once: the sanity check's line (lines) or a first redraw */
  } else {
    if (e != TR_OK) { fprintf(stderr, "tr_fit: %s: %s\n", tr_err_name(e), tr_error(&t)); return 21; }
    if (t.epoch != 3) return 22;
  }
  if (sigaction(SIGPIPE, NULL, &now) != 0) return 18;
  if (disposition == 1 ? now.sa_sigaction != on_sigpipe || !(now.sa_flags & SA_SIGINFO) || !(now.sa_flags & SA_RESTART)
                       : now.sa_handler != (disposition ? SIG_IGN : SIG_DFL)) return 19; /* as it was */
  if (g_pipe_handled) return 20; /* the bar's writes never reached it */
  tr_free(&t);
  return 0;
}
/* /dev/full: stops the bar; says so once on stderr; training goes on */
static int full_child(const char *err_path) {
  tr_trainer t;
  toy m;
  FILE *out = fopen("/dev/full", "w");
  if (!out) return 30;
  if (!freopen(err_path, "w", stderr)) return 31;
  toy_init(&t, &m, NULL);
  if (tr_progress_bar(t.reg, &(tr_progress_bar_desc){ .out = out, .mode = TR_BAR_TTY, .refresh_seconds = 1e-9 }, NULL) != TR_OK) return 32;
  if (toy_fit(&t, &m, 3, 1) != TR_OK) return 33;
  if (t.epoch != 3) return 34;
  tr_free(&t);
  fclose(out);
  return 0;
}
static void test_bar_closed_stream(void **state) {
  char path[400], *text;
  int v;
  (void)state;
  for (v = 0; v < 9; v++) { /* 0-5: pipes (lines, terminal) x (SIG_DFL, handler, SIG_IGN); 6: /dev/full; 7, 8: unbuffered pipes */
    pid_t pid;
    int status = -1;
    snprintf(path, sizeof path, "%s/bar_err%d.txt", g_root, v);
    fflush(NULL);
    pid = fork();
    if (pid == 0) _exit(v < 6 ? pipe_child(v & 1, v >> 1, 0, path) : v == 6 ? full_child(path) : pipe_child(0, v == 7 ? 0 : 2, 1, path));
    assert_true(waitpid(pid, &status, 0) == pid);
    if (WIFSIGNALED(status)) fail_msg("variant %d: killed by signal %d (SIGPIPE is %d)", v, WTERMSIG(status), SIGPIPE);
    assert_true(WIFEXITED(status));
    text = slurp_len(path, NULL);
    if (WEXITSTATUS(status)) fail_msg("variant %d: check %d failed; stderr:\n%s", v, WEXITSTATUS(status), text ? text : "");
    assert_non_null(text);
    if (v < 2 || v == 7) assert_int_equal(count_str(text, "progress_bar"), 0); /* the run's error says it */
    else if (v != 6) /* EPIPE named, not "Input/output error" (issue 37, item 12) */
      assert_int_equal(count_str(text, "progress_bar: stdout was closed (Broken pipe: its reader exited): the bar draws nothing "
                                       "more (training goes on: this process ignores or handles SIGPIPE)\n"), 1);
    else assert_int_equal(count_str(text, "progress_bar: cannot write to its stream: No space left on device; the bar draws "
                                          "nothing more (training goes on)\n"), 1);
    if (v >= 2 && v != 7) assert_int_equal(count_str(text, "progress_bar"), 1); /* once */
    free(text);
  }
}

/* ---- errors: reported once, training goes on; fail_on_error fails it; rank 1 writes nothing ------ */
static void test_errors(void **state) {
  char dir[300], path[700], blocker[400], *log_text = NULL;
  size_t log_len = 0;
  FILE *log = open_memstream(&log_text, &log_len);
  tr_trainer t;
  toy m;
  hk_handle h;
  tr_err e;
  (void)state;
  subdir(dir, sizeof dir, "errors");
  snprintf(blocker, sizeof blocker, "%s/a_file", dir);
  fclose(fopen(blocker, "w"));
  /* a directory below a regular file cannot be made (even by root) */
  toy_init(&t, &m, log);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = blocker }, &h), TR_OK);
  assert_int_equal(toy_fit(&t, &m, 2, 1), TR_OK);
  fflush(log);
  assert_contains(log_text, "csv: cannot create the directory ");
  assert_contains(log_text, "Not a directory; this logger writes nothing more (training goes on)");
  assert_null(strstr(strstr(log_text, "csv:") + 4, "csv:")); /* once */
  assert_contains(tr_logger_get(t.reg, h)->error, "Not a directory");
  assert_int_equal(t.global_step, 2 * NB);
  tr_free(&t);

  /* (a full disk: test_full_disk; a link planted at metrics.csv, as /dev/full was here: test_no_link_following) */
  (void)path;

  /* fail_on_error: the run fails with the reason */
  toy_init(&t, &m, log);
  assert_int_equal(hk_spec_apply(t.reg, "jsonl(save_dir=\"/dev/null/x\", fail_on_error=true)"), HK_OK);
  e = toy_fit(&t, &m, 1, 1);
  assert_int_equal(e, TR_ERR_HOOK);
  assert_contains(tr_error(&t), "jsonl logger: cannot create the directory /dev/null/x/lightning_logs: Not a directory");
  tr_free(&t);
  fclose(log);
  free(log_text);
}

static hk_signal be_rank1(hk_ctx *ctx, void *user) { (void)user; ctx->rank = 1; ctx->world_size = 2; return HK_CONTINUE; }
static void test_rank1_writes_nothing(void **state) {
  char dir[300], path[700];
  tr_trainer t;
  toy m;
  (void)state;
  subdir(dir, sizeof dir, "rank1");
  toy_init(&t, &m, NULL);
  assert_int_equal(hk_on(t.reg, HK_SETUP, be_rank1, NULL, &(hk_opts){ .order = -10 }, NULL), HK_OK);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir }, NULL), TR_OK);
  assert_int_equal(tr_tensorboard_logger(t.reg, &(tr_logger_desc){ .save_dir = dir }, NULL), TR_OK);
  assert_int_equal(tr_plot(t.reg, &(tr_plot_desc){ .dir = { .save_dir = dir } }, NULL), TR_OK);
  assert_int_equal(toy_fit(&t, &m, 1, 1), TR_OK);
  snprintf(path, sizeof path, "%s/lightning_logs", dir);
  assert_true(access(path, F_OK) != 0);
  tr_free(&t);
}

static void test_bad_parameters(void **state) {
  tr_trainer t;
  toy m;
  (void)state;
  toy_init(&t, &m, NULL);
  assert_int_equal(tr_csv_logger(t.reg, NULL, NULL), TR_ERR_INVALID);
  assert_contains(hk_last_error(t.reg), "csv: desc is NULL");
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .flush_every = -1 }, NULL), TR_ERR_INVALID);
  assert_contains(hk_last_error(t.reg), "csv: flush_every must be >= 0");
  assert_int_equal(tr_jsonl_logger(t.reg, &(tr_logger_desc){ .version = "a/b" }, NULL), TR_ERR_INVALID);
  assert_contains(hk_last_error(t.reg), "jsonl: version 'a/b' must be a directory name without '/'");
  assert_int_equal(tr_tensorboard_logger(t.reg, &(tr_logger_desc){ .save_dir = "" }, NULL), TR_ERR_INVALID);
  assert_contains(hk_last_error(t.reg), "tensorboard: save_dir is empty");
  assert_int_equal(tr_progress_bar(t.reg, &(tr_progress_bar_desc){ .mode = (tr_bar_mode)7 }, NULL), TR_ERR_INVALID);
  assert_contains(hk_last_error(t.reg), "progress_bar: mode 7 is not valid");
  assert_int_equal(tr_progress_bar(t.reg, &(tr_progress_bar_desc){ .refresh_seconds = -1 }, NULL), TR_ERR_INVALID);
  assert_int_equal(tr_plot(t.reg, NULL, NULL), TR_ERR_INVALID);
  assert_int_equal(hk_spec_apply(t.reg, "csv(flush_every=-1)"), HK_ERR_INVALID);
  assert_contains(hk_last_error(t.reg), "csv: flush_every must be between 0 and 1e9 (0: once a second), got -1");
  assert_int_equal(hk_spec_apply(t.reg, "progress_bar(mode=fancy)"), HK_ERR_SPEC);
  assert_contains(hk_last_error(t.reg), "auto|tty|lines");
  assert_int_equal(hk_spec_apply(t.reg, "progress_bar(width=-3)"), HK_ERR_INVALID);
  assert_int_equal(hk_spec_apply(t.reg, "tensorboard(save_dir=runs, colour=red)"), HK_ERR_SPEC);
  /* one bar per registry: a second would print every line twice */
  assert_int_equal(tr_progress_bar(t.reg, &(tr_progress_bar_desc){ .mode = TR_BAR_LINES }, NULL), TR_OK);
  assert_int_equal(tr_progress_bar(t.reg, &(tr_progress_bar_desc){ .mode = TR_BAR_LINES }, NULL), TR_ERR_INVALID);
  assert_contains(hk_last_error(t.reg), "progress_bar: this registry has a progress bar already");
  assert_int_equal(hk_spec_apply(t.reg, "progress_bar"), HK_ERR_INVALID);
  assert_int_equal(hk_count(t.reg, HK_ON_TRAIN_BATCH_END), 1);
  hk_off(t.reg, hk_find(t.reg, "progress_bar"));
  assert_int_equal(hk_spec_apply(t.reg, "progress_bar"), HK_OK); /* once the first is gone, a new one is fine */
  assert_int_equal(hk_count(t.reg, HK_ON_LOG), 1); /* nothing was registered but the one bar */
  assert_int_equal(tr_log_histogram(&t.ctx, "", NULL, 0), TR_ERR_INVALID);
  tr_free(&t);
}

/* ---- files are never written through links, nor put in place of special files (issue 18, item 4) -- */
static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}
static int is_link(const char *path) { struct stat st; return lstat(path, &st) == 0 && S_ISLNK(st.st_mode); }
static void test_no_link_following(void **state) {
  char dir[300], v[400], path[700], victim[700], why[1200], *log_text = NULL, *text;
  size_t log_len = 0;
  FILE *log = open_memstream(&log_text, &log_len);
  tr_trainer t;
  toy m;
  hk_handle h;
  int i, n0;
  struct stat st;
  (void)state;
  subdir(dir, sizeof dir, "links");
  snprintf(victim, sizeof victim, "%s/victim", dir);
  write_text(victim, "precious\n");

  /* hparams.yaml is a link: not written through, the logger says why and training goes on */
  snprintf(v, sizeof v, "%s/lightning_logs/a", dir);
  assert_int_equal(tr__mkdirs(v), 0);
  snprintf(path, sizeof path, "%s/hparams.yaml", v);
  assert_int_equal(symlink(victim, path), 0);
  toy_init(&t, &m, log);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "a" }, &h), TR_OK);
  assert_int_equal(toy_fit(&t, &m, 1, 1), TR_OK);
  fflush(log);
  assert_contains(log_text, "hparams.yaml is not a regular file (a symlink, a device, a FIFO or a directory): it is not replaced");
  assert_true(is_link(path));
  tr_free(&t);

  /* metrics.csv and metrics.jsonl are links */
  snprintf(v, sizeof v, "%s/lightning_logs/b", dir);
  assert_int_equal(tr__mkdirs(v), 0);
  snprintf(path, sizeof path, "%s/metrics.csv", v);
  assert_int_equal(symlink(victim, path), 0);
  snprintf(path, sizeof path, "%s/metrics.jsonl", v);
  assert_int_equal(symlink(victim, path), 0);
  rewind(log);
  toy_init(&t, &m, log);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "b" }, NULL), TR_OK);
  assert_int_equal(tr_jsonl_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "b" }, NULL), TR_OK);
  assert_int_equal(toy_fit(&t, &m, 1, 1), TR_OK);
  fflush(log);
  assert_contains(log_text, "metrics.csv is not a regular file");
  assert_contains(log_text, "metrics.jsonl is not a regular file");
  assert_true(is_link(path));
  tr_free(&t);

  /* a new column rewrites metrics.csv through a temporary: links planted at the old fixed name and at
     the next names the writer will try are skipped, never followed */
  snprintf(v, sizeof v, "%s/lightning_logs/c", dir);
  assert_int_equal(tr__mkdirs(v), 0);
  snprintf(path, sizeof path, "%s/metrics.csv.tmp", v);
  assert_int_equal(symlink(victim, path), 0);
  { /* the writer's next number: make one temporary the same way */
    char probe[800], *dot;
    int fd;
    snprintf(path, sizeof path, "%s/probe", v);
    fd = tr__open_temp(path, probe, sizeof probe);
    assert_true(fd >= 0);
    close(fd);
    unlink(probe);
    dot = strrchr(probe, '.');
    n0 = atoi(dot + 1) + 1;
  }
  for (i = n0; i < n0 + 40; i++) {
    snprintf(path, sizeof path, "%s/metrics.csv.tmp.%ld.%d", v, (long)getpid(), i);
    assert_int_equal(symlink(victim, path), 0);
  }
  rewind(log);
  toy_init(&t, &m, log);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "c", .flush_every = 1 }, NULL), TR_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_LOG, edit_record, NULL, NULL, NULL), HK_OK); /* "extra" from step 5 */
  assert_int_equal(toy_fit(&t, &m, 2, 1), TR_OK);
  snprintf(path, sizeof path, "%s/metrics.csv", v);
  text = slurp_len(path, NULL);
  assert_non_null(text);
  assert_true(strncmp(text, "epoch,extra,step,train/loss,val/loss\n", 37) == 0);
  free(text);
  assert_true(lstat(path, &st) == 0 && S_ISREG(st.st_mode));
  tr_free(&t);

  /* the plot: a link, a FIFO and (as root) a device node at its path are left alone */
  {
    const char *kinds[3] = { "link.svg", "fifo.svg", "null.svg" };
    for (i = 0; i < 3; i++) {
      snprintf(path, sizeof path, "%s/%s", dir, kinds[i]);
      if (i == 0) assert_int_equal(symlink(victim, path), 0);
      if (i == 1) assert_int_equal(mkfifo(path, 0666), 0);
      if (i == 2 && mknod(path, S_IFCHR | 0666, makedev(1, 3)) != 0) { printf("  (no device node: %s)\n", strerror(errno)); continue; }
      rewind(log);
      toy_init(&t, &m, log);
      assert_int_equal(tr_plot(t.reg, &(tr_plot_desc){ .dir = { .save_dir = dir, .version = "plot" }, .path = path }, &h), TR_OK);
      assert_int_equal(toy_fit(&t, &m, 1, 1), TR_OK);
      fflush(log);
      assert_contains(tr_logger_get(t.reg, h)->error, "is not a regular file");
      assert_true(lstat(path, &st) == 0);
      assert_true(i == 0 ? S_ISLNK(st.st_mode) : i == 1 ? S_ISFIFO(st.st_mode) : S_ISCHR(st.st_mode));
      tr_free(&t);
    }
    snprintf(path, sizeof path, "%s/link.svg", dir);
    snprintf(v, sizeof v, "%s/lightning_logs/c/metrics.csv", dir);
    assert_int_equal(tr_plot_csv(v, path, NULL, why, sizeof why), TR_ERR_IO);
    assert_contains(why, "link.svg is not a regular file");
  }

  /* tr_save shares the writer: a FIFO at the path is not replaced; a link is replaced itself (as
     model_checkpoint's last.ckpt link is), its target untouched */
  toy_init(&t, &m, log);
  snprintf(path, sizeof path, "%s/fifo.svg", dir);
  assert_int_equal(tr_save(&t, path), TR_ERR_IO);
  assert_contains(tr_error(&t), "is not a regular file");
  assert_true(lstat(path, &st) == 0 && S_ISFIFO(st.st_mode));
  snprintf(path, sizeof path, "%s/link.svg", dir);
  assert_int_equal(tr_save(&t, path), TR_OK);
  assert_true(lstat(path, &st) == 0 && S_ISREG(st.st_mode));
  tr_free(&t);

  assert_file(victim, "precious\n");
  fclose(log);
  free(log_text);
}

/* ---- a file the loggers did not write is never replaced (issue 28, item 1) ------------------------
   A version given (the directory may exist): a file of a logger's name in it - a user's own, an earlier
   run's - makes the logger refuse at its open, naming the file and what to do; training goes on, the
   file is untouched (fail_on_error: the run fails). One that comes between the open and the first
   write, or that takes the place of the logger's own file during the run, is not replaced either. */
static hk_signal plant_file(hk_ctx *ctx, void *user) { /* at on_train_start: before metrics.csv's first rows */
  (void)ctx;
  write_text((const char *)user, "mine, planted\n");
  return HK_CONTINUE;
}
static hk_signal swap_file(hk_ctx *ctx, void *user) { /* at step 3: a file of the user's renamed over the logger's */
  char tmp[800];
  snprintf(tmp, sizeof tmp, "%s.user", (const char *)user);
  write_text(tmp, "mine, swapped in\n");
  if (rename(tmp, (const char *)user) != 0) return ctx ? hk_fail(ctx, "rename: %s", strerror(errno)) : HK_FAIL;
  return HK_CONTINUE;
}
static void test_version_never_replaces(void **state) {
  static const char *const names[] = { "metrics.csv", "hparams.yaml", "metrics.jsonl", "metrics.svg" };
  char dir[300], v[400], path[700], *log_text = NULL, *first, *again;
  size_t log_len = 0, i;
  FILE *log = open_memstream(&log_text, &log_len);
  tr_trainer t;
  toy m;
  hk_handle h;
  const tr_logger_state *st;
  (void)state;
  subdir(dir, sizeof dir, "no_replace");

  /* a file of the user's at each logger's name: refused at the open (setup), named, with what to do */
  for (i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(v, sizeof v, "%s/lightning_logs/user%d", dir, (int)i);
    assert_int_equal(tr__mkdirs(v), 0);
    snprintf(path, sizeof path, "%s/%s", v, names[i]);
    write_text(path, "my own notes\n");
    snprintf(v, sizeof v, "user%d", (int)i);
    toy_init(&t, &m, log);
    if (i <= 1) assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = v }, &h), TR_OK);
    else if (i == 2) assert_int_equal(tr_jsonl_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = v }, &h), TR_OK);
    else assert_int_equal(tr_plot(t.reg, &(tr_plot_desc){ .dir = { .save_dir = dir, .version = v } }, &h), TR_OK);
    assert_int_equal(toy_fit(&t, &m, 1, 1), TR_OK); /* training goes on */
    st = tr_logger_get(t.reg, h);
    assert_contains(st->error, path);
    assert_contains(st->error, "exists, and this logger did not write it");
    assert_contains(st->error, "give the logger another version");
    assert_contains(st->error, "or remove the file");
    assert_int_equal(st->records, 0);
    tr_free(&t);
    assert_file(path, "my own notes\n");
    if (i == 0) { /* nothing else written beside it either */
      snprintf(path, sizeof path, "%s/lightning_logs/user0/hparams.yaml", dir);
      assert_true(access(path, F_OK) != 0);
    }
  }
  fflush(log);
  assert_contains(log_text, "csv: ");
  assert_contains(log_text, "metrics.csv exists, and this logger did not write it");
  assert_contains(log_text, "this logger writes nothing more (training goes on)");

  /* an earlier run's logs: a second run with the same version leaves them as they are */
  toy_init(&t, &m, log);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "rerun" }, NULL), TR_OK);
  assert_int_equal(tr_jsonl_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "rerun" }, NULL), TR_OK);
  assert_int_equal(toy_fit(&t, &m, 1, 1), TR_OK);
  tr_free(&t);
  snprintf(path, sizeof path, "%s/lightning_logs/rerun/metrics.csv", dir);
  first = slurp_len(path, NULL);
  assert_non_null(first);
  toy_init(&t, &m, log);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "rerun" }, &h), TR_OK);
  assert_int_equal(toy_fit(&t, &m, 2, 1), TR_OK);
  assert_contains(tr_logger_get(t.reg, h)->error, "a resume continues its own run's files: resume from a checkpoint of that run");
  tr_free(&t);
  assert_file(path, first);
  free(first);

  /* fail_on_error: the run fails at its setup, naming the file */
  toy_init(&t, &m, log);
  assert_int_equal(tr_jsonl_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "rerun", .fail_on_error = TR_YES }, NULL), TR_OK);
  assert_int_equal(toy_fit(&t, &m, 1, 1), TR_ERR_HOOK);
  assert_contains(tr_error(&t), "rerun/metrics.jsonl exists, and this logger did not write it");
  assert_int_equal(t.global_step, 0);
  tr_free(&t);

  /* a file that comes after the open (csv's metrics.csv waits for its first rows): not replaced */
  snprintf(v, sizeof v, "%s/lightning_logs/late", dir);
  snprintf(path, sizeof path, "%s/metrics.csv", v);
  toy_init(&t, &m, log);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "late", .flush_every = 1 }, &h), TR_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_TRAIN_START, plant_file, path, NULL, NULL), HK_OK);
  assert_int_equal(toy_fit(&t, &m, 1, 1), TR_OK);
  assert_contains(tr_logger_get(t.reg, h)->error, "metrics.csv is there and was not written by this logger");
  tr_free(&t);
  assert_file(path, "mine, planted\n");

  /* the logger's own file replaced by another during the run: csv's rewrite for a new column (step 5)
     leaves that one as it is; the plot's second write (the test's teardown) too */
  snprintf(v, sizeof v, "%s/lightning_logs/swapped", dir);
  snprintf(path, sizeof path, "%s/metrics.csv", v);
  toy_init(&t, &m, log);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "swapped", .flush_every = 1 }, &h), TR_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_LOG, edit_record, NULL, NULL, NULL), HK_OK); /* "extra" from step 5 */
  assert_int_equal(hk_on(t.reg, HK_ON_TRAIN_BATCH_END, swap_file, path, &(hk_opts){ .filter = { .once_at = 3 } }, NULL), HK_OK);
  assert_int_equal(toy_fit(&t, &m, 2, 1), TR_OK);
  assert_contains(tr_logger_get(t.reg, h)->error, "metrics.csv is there and was not written by this logger");
  tr_free(&t);
  assert_file(path, "mine, swapped in\n");
  snprintf(path, sizeof path, "%s/lightning_logs/plot2/metrics.svg", dir);
  toy_init(&t, &m, log);
  assert_int_equal(tr_plot(t.reg, &(tr_plot_desc){ .dir = { .save_dir = dir, .version = "plot2" } }, &h), TR_OK);
  assert_int_equal(toy_fit(&t, &m, 1, 1), TR_OK); /* the fit's teardown writes it */
  again = slurp_len(path, NULL);
  assert_non_null(again);
  assert_contains(again, "<svg");
  free(again);
  assert_int_equal(tr_validate(&t, &(tr_data){ .count = toy_count2, .get = toy_get, .user = &m }, 0, NULL), TR_OK); /* its own: rewritten */
  assert_string_equal(tr_logger_get(t.reg, h)->error, "");
  assert_int_equal(swap_file(NULL, path), HK_CONTINUE); /* another file (another inode) in its place */
  assert_int_equal(tr_validate(&t, &(tr_data){ .count = toy_count2, .get = toy_get, .user = &m }, 0, NULL), TR_OK);
  assert_contains(tr_logger_get(t.reg, h)->error, "metrics.svg is there and was not written by this logger");
  tr_free(&t);
  assert_file(path, "mine, swapped in\n");

  /* a plot given its own path writes that file, over a regular file there (its user named it) */
  snprintf(path, sizeof path, "%s/named.svg", dir);
  write_text(path, "an old plot\n");
  toy_init(&t, &m, log);
  assert_int_equal(tr_plot(t.reg, &(tr_plot_desc){ .dir = { .save_dir = dir, .version = "plot3" }, .path = path }, &h), TR_OK);
  assert_int_equal(toy_fit(&t, &m, 1, 1), TR_OK);
  assert_string_equal(tr_logger_get(t.reg, h)->error, "");
  tr_free(&t);
  again = slurp_len(path, NULL);
  assert_contains(again, "<svg");
  free(again);
  fclose(log);
  free(log_text);
}

/* ---- parallel runs claim distinct version directories (item 5) ------------------------------------ */
static int child_fit(const char *save_dir, int go) {
  tr_trainer t;
  toy m;
  char c;
  tr_data train = { .count = toy_count, .get = toy_get, .user = &m, .batch_size = 1 };
  tr_data val = { .count = toy_count2, .get = toy_get, .user = &m };
  tr_err e;
  memset(&m, 0, sizeof m);
  m.p[0] = 1.0f;
  m.t = &t;
  if (tr_init(&t, &(tr_desc){ .model = { .params = m.p, .grads = m.g, .n_params = 2, .user = &m, .forward = toy_forward,
                                          .backward = toy_backward }, .optim = { .kind = TR_OPTIM_SGD, .lr = 0.1 } })) return 10;
  if (tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = save_dir, .flush_every = 1 }, NULL)) return 11;
  if (read(go, &c, 1) < 0) return 12; /* all start together: the parent closes the pipe */
  e = tr_fit(&t, &(tr_config){ .train = &train, .val = &val, .max_epochs = 2, .log_every_n_steps = 1, .no_sigint = 1 });
  tr_free(&t);
  return e ? 13 : 0;
}
static void test_parallel_versions(void **state) {
  enum { PROCS = 12, TRIALS = 5 };
  int trial;
  (void)state;
  for (trial = 0; trial < TRIALS; trial++) {
    char dir[300], name[32], path[700], *first = NULL;
    int go[2], i, versions = 0;
    pid_t pids[PROCS];
    snprintf(name, sizeof name, "parallel%d", trial);
    subdir(dir, sizeof dir, name);
    assert_int_equal(pipe(go), 0);
    fflush(stdout);
    for (i = 0; i < PROCS; i++) {
      pids[i] = fork();
      assert_true(pids[i] >= 0);
      if (pids[i] == 0) {
        close(go[1]);
        _exit(child_fit(dir, go[0]));
      }
    }
    close(go[0]);
    close(go[1]); /* go */
    for (i = 0; i < PROCS; i++) {
      int st = 0;
      assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("child %d: status %d", i, st);
    }
    for (i = 0; i < PROCS + 5; i++) { /* version_0 .. version_11, each with a whole metrics.csv of its own */
      char *text;
      snprintf(path, sizeof path, "%s/lightning_logs/version_%d/metrics.csv", dir, i);
      if (!(text = slurp_len(path, NULL))) continue;
      versions++;
      if (!first) first = text;
      else {
        if (strcmp(first, text)) fail_msg("trial %d: %s differs:\n%s---\n%s", trial, path, text, first);
        free(text);
      }
    }
    assert_non_null(first);
    assert_true(strncmp(first, "epoch,step,train/loss,val/loss\n0,0,2,\n", 38) == 0);
    assert_non_null(strstr(first, "\n1,7,,0.6\n")); /* whole: the last row */
    free(first);
    if (versions != PROCS) fail_msg("trial %d: %d processes wrote %d version directories", trial, PROCS, versions);
  }
}

/* ---- any number of metrics, names of any length (item 6) ------------------------------------------ */
static hk_signal many_metrics(hk_ctx *ctx, void *user) {
  char name[1100];
  int i;
  (void)user;
  for (i = 0; i < 150; i++) {
    snprintf(name, sizeof name, "m/%03d", i);
    hk_metric_set(ctx, name, i);
  }
  memset(name, 'L', 1000);
  name[0] = 'l';
  name[1000] = 0;
  hk_metric_set(ctx, name, 7);
  return HK_CONTINUE;
}
/* tr_log_set's name index (constant per value at any count: make bench-metrics) keeps every answer right
   through what a loop does to a record: thousands of names, changes in place, drops from the middle (the
   ones after move), n_metrics cut to a few or to 0 and names added again in another order. */
static void test_record_index(void **state) {
  static tr_log_record r;
  char name[32];
  int i, n = 5000;
  double v;
  (void)state;
  memset(&r, 0, sizeof r);
  for (i = 0; i < n; i++) {
    snprintf(name, sizeof name, "m/%d", i);
    assert_int_equal(tr_log_set(&r, name, i), TR_OK);
  }
  for (i = 0; i < n; i += 7) {
    snprintf(name, sizeof name, "m/%d", i);
    assert_int_equal(tr_log_set(&r, name, -i), TR_OK); /* in place */
  }
  assert_int_equal(r.n_metrics, n);
  for (i = 0; i < n; i++) {
    snprintf(name, sizeof name, "m/%d", i);
    assert_true(tr_log_get(&r, name, &v));
    assert_true(v == (i % 7 ? i : -i));
    assert_string_equal(r.metrics[i].name, name); /* the order they came in */
  }
  assert_false(tr_log_get(&r, "m/5000", &v));
  assert_false(tr_log_get(&r, "m/", &v));
  for (i = 10; i < 20; i++) { /* drops from the middle: everything after moves down */
    snprintf(name, sizeof name, "m/%d", i);
    assert_int_equal(tr_log_drop(&r, name), 1);
    assert_false(tr_log_get(&r, name, &v));
  }
  assert_int_equal(r.n_metrics, n - 10);
  assert_true(tr_log_get(&r, "m/4999", &v) && v == 4999);
  assert_true(tr_log_get(&r, "m/20", &v) && v == 20);
  assert_string_equal(r.metrics[10].name, "m/20");
  assert_int_equal(tr_log_set(&r, "m/15", 1.5), TR_OK); /* back, at the end */
  assert_string_equal(r.metrics[r.n_metrics - 1].name, "m/15");
  r.n_metrics = 3; /* cut: the first three stay, the rest are gone */
  assert_true(tr_log_get(&r, "m/2", &v) && v == 2);
  assert_false(tr_log_get(&r, "m/3", &v));
  assert_false(tr_log_get(&r, "m/15", &v));
  assert_int_equal(tr_log_set(&r, "m/3000", 7), TR_OK);
  assert_int_equal(r.n_metrics, 4);
  assert_string_equal(r.metrics[3].name, "m/3000");
  assert_true(tr_log_get(&r, "m/3000", &v) && v == 7);
  r.n_metrics = 0; /* the next record: the names again, backwards */
  assert_false(tr_log_get(&r, "m/0", &v));
  for (i = n - 1; i >= 0; i--) {
    snprintf(name, sizeof name, "m/%d", i);
    assert_int_equal(tr_log_set(&r, name, 2.0 * i), TR_OK);
  }
  assert_int_equal(r.n_metrics, n);
  for (i = 0; i < n; i++) {
    snprintf(name, sizeof name, "m/%d", i);
    assert_true(tr_log_get(&r, name, &v) && v == 2.0 * i);
    assert_string_equal(r.metrics[n - 1 - i].name, name);
  }
  tr_log_record_free(&r);
  assert_null(r.metrics);
}
static void test_many_metrics(void **state) {
  static tr_log_record r;
  char dir[300], path[700], name[5000], *text, *longname;
  tr_trainer t;
  toy m;
  hk_handle hc, hj;
  int i;
  double v;
  (void)state;
  /* the record API: 1000 metrics, a 4999-byte name; drop and set again reuse the storage */
  memset(&r, 0, sizeof r);
  for (i = 0; i < 1000; i++) {
    snprintf(name, sizeof name, "metric_%d", i);
    assert_int_equal(tr_log_set(&r, name, i), TR_OK);
  }
  memset(name, 'n', sizeof name - 1);
  name[sizeof name - 1] = 0;
  assert_int_equal(tr_log_set(&r, name, -1), TR_OK);
  assert_int_equal(r.n_metrics, 1001);
  assert_true(tr_log_get(&r, "metric_999", &v) && v == 999);
  assert_true(tr_log_get(&r, name, &v) && v == -1);
  assert_int_equal(tr_log_drop(&r, "metric_0"), 1);
  assert_int_equal(tr_log_set(&r, "metric_0", 5), TR_OK);
  assert_string_equal(r.metrics[1000].name, "metric_0");
  r.n_metrics = 0; /* the next record reuses the names' memory */
  assert_int_equal(tr_log_set(&r, "x", 1), TR_OK);
  assert_int_equal(r.n_metrics, 1);
  tr_log_record_free(&r);

  /* the trainer's records carry all of them to every logger */
  subdir(dir, sizeof dir, "many");
  toy_init(&t, &m, NULL);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "v" }, &hc), TR_OK);
  assert_int_equal(tr_jsonl_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "v" }, &hj), TR_OK);
  assert_int_equal(tr_tensorboard_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "v" }, NULL), TR_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_TRAIN_BATCH_END, many_metrics, NULL, NULL, NULL), HK_OK);
  assert_int_equal(toy_fit(&t, &m, 1, 2), TR_OK);
  longname = (char *)malloc(1001);
  memset(longname, 'L', 1000);
  longname[0] = 'l';
  longname[1000] = 0;
  snprintf(path, sizeof path, "%s/lightning_logs/v/metrics.jsonl", dir);
  text = slurp_len(path, NULL);
  assert_contains(text, "\"m/000\":0,");
  assert_contains(text, "\"m/149\":149,");
  assert_contains(text, longname);
  free(text);
  snprintf(path, sizeof path, "%s/lightning_logs/v/metrics.csv", dir);
  text = slurp_len(path, NULL);
  assert_contains(text, ",m/063,m/064,");
  assert_contains(text, ",m/149,step,");
  assert_contains(text, longname);
  free(text);
  {
    size_t n;
    char *tb;
    snprintf(path, sizeof path, "%s", tr_logger_get(t.reg, hj)->dir);
    strcat(path, "/");
    { /* the events file: the one name starting so */
      DIR *d = opendir(path);
      struct dirent *e;
      while ((e = readdir(d)) != NULL) if (!strncmp(e->d_name, "events.out.tfevents.", 20)) break;
      assert_non_null(e);
      strcat(path, e->d_name);
      closedir(d);
    }
    tb = slurp_len(path, &n);
    assert_true(find_bytes((unsigned char *)tb, n, "m/149", 5));
    assert_true(find_bytes((unsigned char *)tb, n, longname, 1000));
    free(tb);
  }
  free(longname);
  tr_free(&t);
}

/* ---- names that are not UTF-8 (item 9) -------------------------------------------------------------- */
/* 1 when p[0..n) is UTF-8 (written apart from train.h's check: code points decoded and range-checked) */
static int utf8_valid(const unsigned char *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = p[i], cp, need, k;
    if (c < 0x80) { i++; continue; }
    if ((c & 0xE0) == 0xC0) { cp = c & 0x1F; need = 1; }
    else if ((c & 0xF0) == 0xE0) { cp = c & 0x0F; need = 2; }
    else if ((c & 0xF8) == 0xF0) { cp = c & 0x07; need = 3; }
    else return 0;
    if (i + need >= n) return 0; /* cut short */
    for (k = 1; k <= need; k++) {
      if ((p[i + k] & 0xC0) != 0x80) return 0;
      cp = cp << 6 | (p[i + k] & 0x3F);
    }
    if ((need == 1 && cp < 0x80) || (need == 2 && cp < 0x800) || (need == 3 && cp < 0x10000)) return 0; /* overlong */
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
    i += need + 1;
  }
  return 1;
}
static hk_signal odd_names(hk_ctx *ctx, void *user) {
  (void)user;
  hk_metric_set(ctx, "caf\xc3\xa9", 1);       /* UTF-8: kept */
  hk_metric_set(ctx, "bad\xff", 2);           /* not UTF-8 */
  hk_metric_set(ctx, "over\xc0\xaf", 3);      /* an overlong '/' */
  hk_metric_set(ctx, "sur\xed\xa0\x80", 4);   /* a surrogate */
  return HK_CONTINUE;
}
static void test_utf8_names(void **state) {
  char dir[300], path[700], *text, *log_text = NULL, *first;
  size_t log_len = 0, n;
  FILE *log = open_memstream(&log_text, &log_len);
  static tr_log_record r;
  tr_trainer t;
  toy m;
  hk_handle h;
  (void)state;
  memset(&r, 0, sizeof r);
  assert_int_equal(tr_log_set(&r, "bad\xff", 1), TR_ERR_INVALID);
  assert_int_equal(tr_log_set(&r, "\xe2\x82", 1), TR_ERR_INVALID); /* cut short */
  assert_int_equal(tr_log_set(&r, "\xf4\x90\x80\x80", 1), TR_ERR_INVALID); /* above U+10FFFF */
  assert_int_equal(tr_log_set(&r, "\xf0\x9f\x98\x80 ok", 1), TR_OK);
  tr_log_record_free(&r);

  subdir(dir, sizeof dir, "utf8");
  toy_init(&t, &m, log);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "v" }, NULL), TR_OK);
  assert_int_equal(tr_jsonl_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "v" }, NULL), TR_OK);
  assert_int_equal(tr_tensorboard_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "v" }, &h), TR_OK);
  assert_int_equal(hk_spec_apply(t.reg, "early_stopping(monitor=\"val/\xff\", strict=false)"), HK_OK); /* in the hparams */
  assert_int_equal(hk_on(t.reg, HK_ON_TRAIN_BATCH_END, odd_names, NULL, NULL, NULL), HK_OK);
  assert_int_equal(toy_fit(&t, &m, 1, 1), TR_OK);
  fflush(log);
  /* each bad name reported once, its bytes escaped */
  assert_contains(log_text, "the metric 'bad\\xFF' is not logged: its name is not valid UTF-8");
  assert_contains(log_text, "the metric 'over\\xC0\\xAF' is not logged");
  assert_contains(log_text, "the metric 'sur\\xED\\xA0\\x80' is not logged");
  first = strstr(log_text, "'bad\\xFF'");
  assert_null(strstr(first + 1, "'bad\\xFF'"));
  snprintf(path, sizeof path, "%s/lightning_logs/v/metrics.jsonl", dir);
  text = slurp_len(path, &n);
  assert_true(utf8_valid((unsigned char *)text, n));
  assert_contains(text, "\"caf\xc3\xa9\":1");
  assert_contains(text, "early_stopping(monitor=\\\"val/\xef\xbf\xbd\\\""); /* the spec's bad byte: U+FFFD */
  free(text);
  snprintf(path, sizeof path, "%s/lightning_logs/v/metrics.csv", dir);
  text = slurp_len(path, &n);
  assert_true(utf8_valid((unsigned char *)text, n));
  assert_true(strncmp(text, "caf\xc3\xa9,epoch,step,train/loss,val/loss\n", 33) == 0);
  free(text);
  snprintf(path, sizeof path, "%s/lightning_logs/v/hparams.yaml", dir);
  text = slurp_len(path, &n);
  assert_true(utf8_valid((unsigned char *)text, n));
  free(text);
  text = slurp_len(tr_logger_get(t.reg, h)->path, &n); /* the hparams text and the tags */
  assert_false(find_bytes((unsigned char *)text, n, "val/\xff", 5)); /* (a binary file: other 0xFF bytes are numbers) */
  assert_false(find_bytes((unsigned char *)text, n, "bad\xff", 4));
  assert_true(find_bytes((unsigned char *)text, n, "val/\xef\xbf\xbd", 7));
  free(text);
  tr_free(&t);
  fclose(log);
  free(log_text);
}

/* ---- a full disk leaves whole records (item 9) ------------------------------------------------------ */
static void check_whole_lines(const char *path, int csv) {
  size_t n, i, start = 0;
  char *text = slurp_len(path, &n);
  int commas = -1;
  assert_non_null(text);
  assert_true(n > 100);
  if (text[n - 1] != '\n') fail_msg("%s ends in a torn line: ...%s", path, text + (n > 80 ? n - 80 : 0));
  for (i = 0; i < n; i++) {
    if (text[i] != '\n') continue;
    if (csv) { /* every row has the header's cells */
      int c = 0;
      size_t k;
      for (k = start; k < i; k++) c += text[k] == ',';
      if (commas < 0) commas = c;
      else if (c != commas) fail_msg("%s: a row with %d cells, the header has %d", path, c + 1, commas + 1);
    } else if (text[start] != '{' || text[i - 1] != '}') fail_msg("%s: a line that is not a whole object", path);
    start = i + 1;
  }
  free(text);
}
static void check_whole_tb(const char *path) {
  size_t n, pos = 0;
  unsigned char *p = (unsigned char *)slurp_len(path, &n);
  int records = 0;
  assert_non_null(p);
  while (pos < n) {
    uint64_t len = 0;
    int k;
    if (pos + 12 > n) fail_msg("%s: a partial record header at %zu of %zu", path, pos, n);
    for (k = 7; k >= 0; k--) len = len << 8 | p[pos + k];
    if (pos + 16 + len > n) fail_msg("%s: a partial record at %zu of %zu", path, pos, n);
    assert_int_equal(tr__get(p + pos + 12 + len, 4), tr_crc32c_masked(p + pos + 12, (size_t)len));
    pos += 16 + (size_t)len;
    records++;
  }
  assert_true(records > 10);
  free(p);
}
static void test_full_disk(void **state) {
  char dir[300], cmd[800], path[700], *log_text = NULL;
  size_t log_len = 0;
  FILE *log = open_memstream(&log_text, &log_len);
  int kind;
  (void)state;
  subdir(dir, sizeof dir, "full");
  snprintf(cmd, sizeof cmd, "mount -t tmpfs -o size=64k tmpfs '%s' 2>/dev/null", dir);
  if (system(cmd) != 0) {
    printf("  test_full_disk skipped: mount -t tmpfs refused (it needs root)\n");
    fclose(log);
    free(log_text);
    skip();
  }
  for (kind = 0; kind < 3; kind++) { /* one logger at a time fills the 64 KiB disk */
    tr_trainer t;
    toy m;
    hk_handle h;
    tr_data train = { .count = toy_count, .get = toy_get, .user = &m, .batch_size = 1 };
    const tr_logger_desc d = { .save_dir = dir, .version = "v", .flush_every = 1 };
    rewind(log);
    toy_init(&t, &m, log);
    if (kind == 0) assert_int_equal(tr_jsonl_logger(t.reg, &d, &h), TR_OK);
    if (kind == 1) assert_int_equal(tr_tensorboard_logger(t.reg, &d, &h), TR_OK);
    if (kind == 2) assert_int_equal(tr_csv_logger(t.reg, &d, &h), TR_OK);
    assert_int_equal(hk_on(t.reg, HK_ON_LOG, add_nonfinite, NULL, NULL, NULL), HK_OK); /* longer records */
    assert_int_equal(tr_fit(&t, &(tr_config){ .train = &train, .max_steps = 4000, .log_every_n_steps = 1, .no_sigint = 1 }), TR_OK);
    fflush(log);
    assert_contains(tr_logger_get(t.reg, h)->error, "No space left on device");
    snprintf(path, sizeof path, "%s", tr_logger_get(t.reg, h)->path);
    if (kind == 1) check_whole_tb(path);
    else check_whole_lines(path, kind == 2);
    tr_free(&t);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'/lightning_logs", dir);
    assert_int_equal(system(cmd), 0);
  }
  snprintf(cmd, sizeof cmd, "umount '%s'", dir);
  assert_int_equal(system(cmd), 0);
  fclose(log);
  free(log_text);
}

/* ---- csv: a new column at every record costs linear work per column, not quadratic -------------- */
static long long io_written(void) { /* bytes this process passed to write(2) so far */
  FILE *f = fopen("/proc/self/io", "r");
  char line[128];
  long long v = -1;
  if (!f) return -1;
  while (fgets(line, sizeof line, f)) if (sscanf(line, "wchar: %lld", &v) == 1) break;
  fclose(f);
  return v;
}
static hk_signal new_column(hk_ctx *ctx, void *user) {
  tr_log_record *r = tr_log_current(ctx);
  int *k = (int *)user;
  char name[32];
  snprintf(name, sizeof name, "c%04d", (*k)++);
  tr_log_set(r, name, 1.5);
  return HK_CONTINUE;
}
static void test_csv_new_columns_linear(void **state) {
  enum { RECORDS = 1000 };
  char dir[300], path[700], *text, *line;
  size_t n;
  long long before, written;
  tr_trainer t;
  toy m;
  int k = 0, row;
  tr_data train = { .count = toy_count, .get = toy_get, .user = &m, .batch_size = 1 };
  (void)state;
  subdir(dir, sizeof dir, "columns");
  toy_init(&t, &m, NULL);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "v", .flush_every = 1 }, NULL), TR_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_LOG, new_column, &k, NULL, NULL), HK_OK);
  before = io_written();
  if (before < 0) { printf("  test_csv_new_columns_linear skipped: no /proc/self/io\n"); tr_free(&t); skip(); }
  assert_int_equal(tr_fit(&t, &(tr_config){ .train = &train, .max_steps = RECORDS, .log_every_n_steps = 1, .no_sigint = 1 }), TR_OK);
  written = io_written() - before;
  tr_free(&t);
  snprintf(path, sizeof path, "%s/lightning_logs/v/metrics.csv", dir);
  text = slurp_len(path, &n);
  /* the file is whole: RECORDS + 3 columns, row r has 1.5 in column c<r> */
  line = text;
  for (row = -1; row < RECORDS; row++) {
    char *end = strchr(line, '\n'), *p = line;
    int c = 0;
    assert_non_null(end);
    if (row < 0) assert_true(strncmp(line, "c0000,c0001,", 12) == 0);
    for (; p < end; p++) {
      int at_start = p == line || p[-1] == ',';
      if (*p == ',') { c++; if (row == c - 1 && at_start) fail_msg("row %d lacks its column", row); continue; }
      if (row >= 0 && c < RECORDS && at_start && c != row) fail_msg("row %d has a value in column %d", row, c);
      if (row >= 0 && c == row && at_start && strncmp(p, "1.5,", 4)) fail_msg("row %d: its column holds %.10s", row, p);
    }
    assert_int_equal(c, RECORDS + 2);
    line = end + 1;
  }
  assert_int_equal(*line, 0);
  free(text);
  /* every rewrite of the whole file at a new column: ~RECORDS^3/3 bytes (333 MB); paid-for rewrites:
     a few times the final file */
  printf("    csv, a new column at each of %d records: %lld bytes written for a %zu-byte file\n", RECORDS, written, n);
  if (written > 10 * (long long)n + (2 << 20)) fail_msg("%lld bytes written for a %zu-byte file", written, n);
}

/* ---- verbose lines: one write each, "[rank: N] ", rank zero only where Lightning does it ----------- */
static hk_signal be_rank0_of2(hk_ctx *ctx, void *user) { (void)user; ctx->rank = 0; ctx->world_size = 2; return HK_CONTINUE; }
/* The lines a fit printed to a socket whose every write(2) is one packet: each must be one whole line. */
static int read_packets(int fd, char *all, size_t cap) {
  int packets = 0;
  size_t len = 0;
  char buf[4096];
  ssize_t k;
  all[0] = 0;
  while ((k = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT)) > 0) {
    buf[k] = 0;
    if (buf[k - 1] != '\n' || strchr(buf, '\n') != buf + k - 1) fail_msg("a write that is not one whole line: \"%s\"", buf);
    if (len + (size_t)k < cap) { memcpy(all + len, buf, (size_t)k + 1); len += (size_t)k; }
    packets++;
  }
  return packets;
}
static void test_verbose_lines(void **state) {
  int sv[2], run, lines;
  char all[8192];
  (void)state;
  assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
  for (run = 0; run < 4; run++) {
    FILE *f = fdopen(dup(sv[0]), "w");
    tr_trainer t;
    toy m;
    assert_non_null(f);
    setvbuf(f, NULL, _IONBF, 0); /* every stdio call that writes is a write(2): a packet */
    toy_init(&t, &m, f);
    if (run == 0) assert_int_equal(hk_on(t.reg, HK_SETUP, be_rank1, NULL, &(hk_opts){ .order = -10 }, NULL), HK_OK);
    if (run == 1) assert_int_equal(hk_on(t.reg, HK_SETUP, be_rank0_of2, NULL, &(hk_opts){ .order = -10 }, NULL), HK_OK);
    if (run <= 1) {
      assert_int_equal(hk_spec_apply(t.reg, "early_stopping(monitor=val/loss, verbose=true); "
                                            "early_stopping(monitor=other, strict=false, verbose=true, log_rank_zero_only=true)"), HK_OK);
    } else { /* timer says "Time limit reached" on rank 0 only (Lightning's rank_zero_info) */
      if (run == 2) assert_int_equal(hk_on(t.reg, HK_SETUP, be_rank1, NULL, &(hk_opts){ .order = -10 }, NULL), HK_OK);
      assert_int_equal(hk_spec_apply(t.reg, "timer(seconds=0.000001, verbose=true)"), HK_OK);
    }
    assert_int_equal(toy_fit(&t, &m, 2, 50), TR_OK);
    tr_free(&t);
    fclose(f);
    lines = read_packets(sv[1], all, sizeof all);
    if (run == 0) { /* rank 1 of 2: its early_stopping line with the prefix; the rank-zero-only one says nothing */
      assert_int_equal(lines, 1);
      if (strncmp(all, "[rank: 1] early_stopping: Metric val/loss improved. New best score: 0.500\n", 74)) fail_msg("%s", all);
    } else if (run == 1) {
      assert_int_equal(lines, 3);
      assert_contains(all, "[rank: 0] early_stopping: Metric val/loss improved. New best score: 0.500\n");
      assert_contains(all, "[rank: 0] early_stopping: 'other' is not set; check skipped (strict=false)\n");
    } else if (run == 2) assert_int_equal(lines, 0);
    else {
      assert_int_equal(lines, 1);
      if (strncmp(all, "timer: Time limit reached.", 26)) fail_msg("%s", all); /* one process: no prefix */
    }
  }
  close(sv[0]);
  close(sv[1]);
}

/* ---- lr_monitor(logging_interval=epoch): a record per epoch at its start (Lightning parity 2) ------ */
static void test_lr_monitor_epoch(void **state) {
  char dir[300], path[700], *text;
  tr_trainer t;
  toy m;
  (void)state;
  subdir(dir, sizeof dir, "lrm");
  toy_init(&t, &m, NULL);
  assert_int_equal(hk_spec_apply(t.reg, "lr_monitor(logging_interval=epoch, log_momentum=true)"), HK_OK);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "every50" }, NULL), TR_OK);
  assert_int_equal(toy_fit(&t, &m, 3, 50), TR_OK); /* 12 steps: no training record is due */
  tr_free(&t);
  snprintf(path, sizeof path, "%s/lightning_logs/every50/metrics.csv", dir);
  assert_file(path, "epoch,lr-SGD,lr-SGD-momentum,step,val/loss\n"
                    "0,0.1,0,0,\n0,,,3,0.5\n1,0.1,0,4,\n1,,,7,0.6\n2,0.1,0,8,\n2,,,11,0.7\n");
  /* every step logged: the epoch's value is not repeated in the step rows */
  toy_init(&t, &m, NULL);
  assert_int_equal(hk_spec_apply(t.reg, "lr_monitor(logging_interval=epoch)"), HK_OK);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir, .version = "every1" }, NULL), TR_OK);
  assert_int_equal(toy_fit(&t, &m, 2, 1), TR_OK);
  tr_free(&t);
  snprintf(path, sizeof path, "%s/lightning_logs/every1/metrics.csv", dir);
  text = slurp_len(path, NULL);
  assert_true(strncmp(text, "epoch,lr-SGD,step,train/loss,val/loss\n0,0.1,0,,\n0,,0,2,\n0,,1,", 61) == 0);
  assert_contains(text, "\n1,0.1,4,,\n1,,4,");
  assert_null(strstr(text + 45, ",0.1,0,2"));
  { /* exactly two rows carry lr-SGD */
    int rows = 0;
    char *p;
    for (p = text; (p = strstr(p, ",0.1,")) != NULL; p++) rows++;
    assert_int_equal(rows, 2);
  }
  free(text);
}

/* ---- no metrics.csv when nothing is logged (Lightning parity 7) ----------------------------------- */
static void test_no_empty_csv(void **state) {
  char dir[300], path[700];
  tr_trainer t;
  toy m;
  tr_data train = { .count = toy_count, .get = toy_get, .user = &m, .batch_size = 1 };
  (void)state;
  subdir(dir, sizeof dir, "empty");
  toy_init(&t, &m, NULL);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = dir }, NULL), TR_OK);
  assert_int_equal(tr_fit(&t, &(tr_config){ .train = &train, .max_epochs = 1, .log_every_n_steps = 50, .no_sigint = 1 }), TR_OK);
  tr_free(&t);
  snprintf(path, sizeof path, "%s/lightning_logs/version_0/hparams.yaml", dir);
  assert_true(access(path, F_OK) == 0);
  snprintf(path, sizeof path, "%s/lightning_logs/version_0/metrics.csv", dir);
  assert_true(access(path, F_OK) != 0);
}

/* ---- the modes for tests/log.mk --------------------------------------------------------------- */
static int mode_tb(const char *dir) { /* an own loop: the loggers need only on_log records */
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  static tr_log_record r;
  float values[100];
  int i, step;
  char spec[600];
  memset(&ctx, 0, sizeof ctx);
  if (!reg || tr_add_factories(reg) != HK_OK) return 1;
  snprintf(spec, sizeof spec, "tensorboard(save_dir=\"%s\", name=\"\", version=run)", dir);
  if (hk_spec_apply(reg, spec) != HK_OK) { fprintf(stderr, "%s\n", hk_last_error(reg)); return 1; }
  ctx.reg = reg;
  HK_FIRE(reg, HK_SETUP, &ctx);
  for (i = 0; i < 100; i++) values[i] = (float)i / 10.0f;
  memset(&r, 0, sizeof r); /* once: the next records reuse its storage */
  for (step = 0; step < 10; step++) {
    r.n_metrics = r.n_histograms = 0;
    r.step = step;
    r.stage = "train";
    tr_log_set(&r, "train/loss", 1.0 / (step + 1));
    tr_log_set(&r, "lr", 0.5 * step);
    ctx.event = HK_ON_LOG; /* tr_log_histogram* at on_log: into this record */
    ctx.outputs = &r;
    if (step == 3) tr_log_histogram(&ctx, "weights", values, 100);
    if (step == 5) {
      static const double edges[5] = { -1, 0, 1, 2, 3 };
      static const int64_t counts[4] = { 1, 2, 3, 4 };
      tr_log_histogram_bins(&ctx, "grads", 4, edges, counts, 10, 30);
    }
    ctx.outputs = NULL;
    if (tr_log_emit(reg, &ctx, &r) != HK_CONTINUE) return 1;
  }
  HK_FIRE(reg, HK_TEARDOWN, &ctx);
  tr_log_record_free(&r);
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  return 0;
}
/* Three fits into DIR, each with the user's hyperparameters (tests/tb_hparams.py reads them through
   TensorBoard's HParams plugin): version_0 width 64 on "spirals", version_1 width 256 on "moons" with
   fast=true, version_2 width 128 failing at its second epoch. */
static hk_signal fail_at_epoch_1(hk_ctx *ctx, void *u) { (void)u; return ctx->epoch == 1 ? hk_fail(ctx, "boom") : HK_CONTINUE; }
static int mode_tb_hparams(const char *dir) {
  static const struct { double width; const char *data; int fast, fails; } runs[3] = {
    { 64, "spirals", 0, 0 }, { 256, "moons", 1, 0 }, { 128, "spirals", 0, 1 } };
  int i;
  for (i = 0; i < 3; i++) {
    tr_trainer t;
    toy m;
    tr_err e;
    toy_init(&t, &m, NULL);
    if (tr_run_setup(t.reg, &(tr_run_desc){ .save_dir = dir, .name = "" }) || tr_tensorboard_logger(t.reg, &(tr_logger_desc){ 0 }, NULL) ||
        tr_run_hparam_num(t.reg, "width", runs[i].width) || tr_run_hparam(t.reg, "dataset", runs[i].data) ||
        tr_run_hparam_bool(t.reg, "fast", runs[i].fast) || tr_run_hparam_num(t.reg, "seed", 100 + i) || /* the trainer's seed is 7 */
        (runs[i].fails && hk_on(t.reg, HK_ON_TRAIN_EPOCH_START, fail_at_epoch_1, NULL, NULL, NULL)))
      return fprintf(stderr, "tb-hparams: %s\n", hk_last_error(t.reg)), 1;
    e = toy_fit(&t, &m, 3, 1);
    if ((e != TR_OK) != runs[i].fails) return fprintf(stderr, "tb-hparams: run %d: %s\n", i, tr_error(&t)), 1;
    tr_free(&t);
  }
  return 0;
}
/* Validation metrics enough for a line of about 150 characters: wider than every terminal the tmux test uses */
static hk_signal bar_metrics(hk_ctx *ctx, void *user) {
  (void)user;
  hk_metric_set(ctx, "val/accuracy", 0.5 + 0.125 * (double)ctx->epoch);
  hk_metric_set(ctx, "val/top5_accuracy", 0.75);
  hk_metric_set(ctx, "val/perplexity", 12.5 - (double)ctx->epoch);
  return HK_CONTINUE;
}
/* A hook printing above the live bar (tr_print), once per epoch at its middle batch */
static hk_signal bar_say(hk_ctx *ctx, void *user) {
  (void)user;
  if (ctx->batch_idx == NB / 2) tr_print(ctx->reg, "note: epoch %lld half done", (long long)ctx->epoch);
  return HK_CONTINUE;
}
static int mode_bar(int sleep_ms) {
  tr_trainer t;
  toy m;
  tr_data train = { .count = toy_count, .get = toy_get, .user = &m, .batch_size = 1 };
  tr_data val = { .count = toy_count2, .get = toy_get, .user = &m };
  memset(&m, 0, sizeof m);
  m.p[0] = 1.0f;
  m.t = &t;
  m.sleep_us = sleep_ms * 1000;
  if (tr_init(&t, &(tr_desc){ .model = { .params = m.p, .grads = m.g, .n_params = 2, .user = &m, .forward = toy_forward,
                                          .backward = toy_backward }, .optim = { .kind = TR_OPTIM_SGD, .lr = 0.1 } })) return 1;
  if (hk_spec_apply(t.reg, "progress_bar(refresh_seconds=0.05, line_seconds=0.3)")) { fprintf(stderr, "%s\n", hk_last_error(t.reg)); return 1; }
  if (hk_on(t.reg, HK_ON_VALIDATION_EPOCH_END, bar_metrics, NULL, NULL, NULL) ||
      hk_on(t.reg, HK_ON_TRAIN_BATCH_END, bar_say, NULL, NULL, NULL)) return 1;
  if (tr_fit(&t, &(tr_config){ .train = &train, .val = &val, .max_epochs = 3, .log_every_n_steps = 2 })) {
    fprintf(stderr, "test_log --bar: %s\n", tr_error(&t));
    return 1;
  }
  if (t.ctx.rank == 0) printf("done\n"); /* under mpirun: rank 0's bar may still be on its line while others end */
  tr_free(&t);
  return 0;
}
/* --bar-loop SHAPE US: a loop of its own with the bar on stdout, every value it shows known to
   tests/bar_check.py (the same formulas): the training loss of step k (the k-th optimizer step, 1-based)
   bar_loss(k), a validation after step s bar_val(s) for val/loss (its batches' mean) and the two metrics
   of bar_val_metrics. SHAPE: steps (examples/own_loop.c's: tr_run_next, no epochs, a validation every
   BAR_V steps), epochs (examples/epoch_loop.c's: BAR_E epochs of BAR_NB batches, a validation at each
   end, then eight batches' time after the bar's on_train_epoch_end, as a checkpoint's write),
   fast-epochs (the same, BAR_FAST_E epochs shorter than the bar's refresh interval, a checkpoint of 20 ms
   after each: where the time goes) or llmc (llm.c's: the run layer's single calls, a validation at the
   top of every BAR_V-th step, step 0 and the last included). US: microseconds per batch. */
enum { BAR_S = 240, BAR_V = 40, BAR_E = 12, BAR_FAST_E = 60, BAR_NB = 20, BAR_NV = 4 };
static double bar_loss(int64_t k) { return 0.987654321 / (double)(k + 7); }
static double bar_val(int64_t s) { return 1.0 / ((double)s + 80.25); }
static hk_signal bar_val_metrics(hk_ctx *ctx, void *user) { /* a line wider than 80 columns */
  double s = (double)ctx->global_step;
  (void)user;
  hk_metric_set(ctx, "val/accuracy", 0.5 + s / (s + 333.3));
  hk_metric_set(ctx, "val/perplexity", 12.5 + 1000 / (s + 77.7));
  return HK_CONTINUE;
}
static void bar_sleep(int us) { struct timespec ts = { us / 1000000, (us % 1000000) * 1000L }; if (us > 0) nanosleep(&ts, NULL); }
static hk_signal bar_epoch_save(hk_ctx *ctx, void *user) { /* after the bar's epoch end: a checkpoint's time */
  (void)ctx;
  bar_sleep(*(int *)user);
  return HK_CONTINUE;
}
static int mode_bar_loop(const char *shape, int us) {
  static float w[1], g[1];
  hk_tensor pv[] = { { "w", w, 1, 0 } }, gv[] = { { "w", g, 1, 0 } };
  hk_registry *reg = hk_create(NULL);
  const char *spec = "progress_bar";
  int fast = !strcmp(shape, "fast-epochs"), save_us = fast ? 20000 : 8 * us;
  tr_err e;
  if (hk_on(reg, HK_ON_VALIDATION_EPOCH_END, bar_val_metrics, NULL, NULL, NULL) ||
      (strstr(shape, "epochs") && hk_on(reg, HK_ON_TRAIN_EPOCH_END, bar_epoch_save, &save_us, &(hk_opts){ .order = 2000, .monitor = 1 }, NULL)))
    return 1;
  if (!strcmp(shape, "llmc")) { /* the single calls: validate at the top of the step, step 0 and the last included */
    hk_ctx c;
    hk_flow flow;
    int64_t step, b;
    memset(&c, 0, sizeof c);
    memset(&flow, 0, sizeof flow);
    if (tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = BAR_S, .log_every_n_steps = 10, .no_signals = 1,
                                          .spec = spec }) || tr_run_start(reg, &c, NULL)) return fprintf(stderr, "%s\n", hk_last_error(reg)), 1;
    for (step = 0; step <= BAR_S; step++) {
      if (step % BAR_V == 0 || step == BAR_S) {
        double sum = 0;
        for (b = tr_run_eval_start(reg, &c, &flow, "val", BAR_NV); b < BAR_NV; b++) {
          c.batch_idx = b;
          HK_FIRE_FLOW(reg, HK_ON_VALIDATION_BATCH_START, &c, &flow);
          bar_sleep(us);
          sum += bar_val(c.global_step);
          HK_FIRE_FLOW(reg, HK_ON_VALIDATION_BATCH_END, &c, &flow);
          hk_flow_clear(&flow, HK_FLOW_BATCH_SIGNALS);
        }
        tr_run_eval_end(reg, &c, &flow, sum / BAR_NV);
        if (step > 0 && (tr_run_batch_end(reg, &c, &flow) & TR_RUN_STOP)) break;
      }
      if (step == BAR_S) break;
      c.batch_idx = step;
      HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, &c, &flow);
      bar_sleep(us);
      c.loss = bar_loss(c.global_step + 1);
      c.global_step++;
      HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &c, &flow);
      if (tr_run_batch_end(reg, &c, &flow) & TR_RUN_STOP) break;
      hk_flow_clear(&flow, HK_FLOW_BATCH_SIGNALS);
    }
    e = tr_run_finish(reg, &c, TR_OK);
    hk_ctx_free(&c);
  } else {
    int steps = !strcmp(shape, "steps");
    hk_ctx *ctx = tr_run_begin(reg, &(tr_run_desc){ .epochs = steps ? TR_NO : 0, .max_steps = steps ? BAR_S : 0,
        .max_epochs = steps ? 0 : fast ? BAR_FAST_E : BAR_E, .train_batches = steps ? 0 : BAR_NB, .val_every_n_steps = steps ? BAR_V : 0,
        .val_batches = BAR_NV, .log_every_n_steps = 10, .no_signals = 1, TR_VIEWS(pv, gv), .spec = spec }, NULL);
    for (int what; (what = tr_run_next(reg)); ) {
      bar_sleep(us);
      if (what == TR_RUN_VAL_BATCH) { ctx->loss = bar_val(ctx->global_step); continue; }
      ctx->loss = bar_loss(ctx->global_step + 1);
      (void)tr_run_update(reg);
    }
    e = tr_run_end(reg);
  }
  hk_destroy(reg);
  printf("done\n");
  return e != TR_OK;
}
static int mode_crash(const char *dir) {
  tr_trainer t;
  toy m;
  char spec[600];
  tr_data train = { .count = toy_count, .get = toy_get, .user = &m, .batch_size = 1 };
  memset(&m, 0, sizeof m);
  m.t = &t;
  m.sleep_us = 200;
  if (tr_init(&t, &(tr_desc){ .model = { .params = m.p, .grads = m.g, .n_params = 2, .user = &m, .forward = toy_forward,
                                          .backward = toy_backward }, .optim = { .kind = TR_OPTIM_SGD, .lr = 0.1 } })) return 1;
  snprintf(spec, sizeof spec, "csv(save_dir=\"%s\", version=crash, flush_every=3); jsonl(save_dir=\"%s\", version=crash)", dir, dir);
  if (hk_spec_apply(t.reg, spec)) { fprintf(stderr, "%s\n", hk_last_error(t.reg)); return 1; }
  return tr_fit(&t, &(tr_config){ .train = &train, .max_steps = 100000000, .log_every_n_steps = 1 }) != TR_OK;
}

/* --mpi-verbose DIR, under mpirun (built with -DTRAIN_MPI; tests/log_mpi.sh checks what it prints): every
   rank's callbacks talk to stderr, which mpirun merges. */
static int mode_mpi_verbose(const char *dir) {
  tr_trainer t;
  toy m;
  char spec[700];
  tr_data train = { .count = toy_count, .get = toy_get, .user = &m, .batch_size = 1 };
  tr_data val = { .count = toy_count2, .get = toy_get, .user = &m };
  tr_err e;
  memset(&m, 0, sizeof m);
  m.p[0] = 1.0f;
  m.t = &t;
  if (tr_init(&t, &(tr_desc){ .model = { .params = m.p, .grads = m.g, .n_params = 2, .user = &m, .forward = toy_forward,
                                          .backward = toy_backward }, .optim = { .kind = TR_OPTIM_SGD, .lr = 0.1 } })) return 1;
  snprintf(spec, sizeof spec, "early_stopping(monitor=val/loss, patience=100, verbose=true); "
           "early_stopping(monitor=other, strict=false, verbose=true, log_rank_zero_only=true); "
           "model_checkpoint(dirpath=\"%s\", verbose=true)", dir);
  if (hk_spec_apply(t.reg, spec)) { fprintf(stderr, "%s\n", hk_last_error(t.reg)); return 1; }
  e = tr_fit(&t, &(tr_config){ .train = &train, .val = &val, .max_epochs = 3, .no_sigint = 1 });
  if (e) fprintf(stderr, "fit: %s\n", tr_error(&t));
  tr_free(&t);
  return e != TR_OK;
}

/* --print, under mpirun: tr_print once per epoch from every rank's hook and once before any run (a
   registry of its own: the launcher's rank), tr_print_all once per epoch; tests/log_mpi.sh counts them. */
static hk_signal print_epoch(hk_ctx *ctx, void *user) {
  (void)user;
  tr_print(ctx->reg, "print: epoch %lld (rank %d)", (long long)ctx->epoch, ctx->rank);
  tr_print_all(ctx->reg, "print_all: epoch %lld (rank %d)", (long long)ctx->epoch, ctx->rank);
  return HK_CONTINUE;
}
static int mode_print(void) {
  tr_trainer t;
  toy m;
  tr_data train = { .count = toy_count, .get = toy_get, .user = &m, .batch_size = 1 };
  hk_registry *reg = hk_create(NULL);
  tr_err e;
  tr_print(reg, "print: before any run");
  hk_destroy(reg);
  memset(&m, 0, sizeof m);
  m.p[0] = 1.0f;
  m.t = &t;
  if (tr_init(&t, &(tr_desc){ .model = { .params = m.p, .grads = m.g, .n_params = 2, .user = &m, .forward = toy_forward,
                                          .backward = toy_backward }, .optim = { .kind = TR_OPTIM_SGD, .lr = 0.1 } })) return 1;
  tr_print(t.reg, "print: after tr_init");
  if (hk_on(t.reg, HK_ON_TRAIN_EPOCH_END, print_epoch, NULL, NULL, NULL)) return 1;
  e = tr_fit(&t, &(tr_config){ .train = &train, .max_epochs = 2, .no_sigint = 1 });
  if (e) fprintf(stderr, "fit: %s\n", tr_error(&t));
  tr_free(&t);
  return e != TR_OK;
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_crc32c),
    cmocka_unit_test(test_record_api),
    cmocka_unit_test(test_record_index),
    cmocka_unit_test(test_csv_layout),
    cmocka_unit_test(test_jsonl),
    cmocka_unit_test(test_tensorboard),
    cmocka_unit_test(test_histogram_waits),
    cmocka_unit_test(test_histogram_bins),
    cmocka_unit_test(test_gradient_monitor_histogram),
    cmocka_unit_test(test_plot),
    cmocka_unit_test(test_bar_format),
    cmocka_unit_test(test_bar_callback),
    cmocka_unit_test(test_bar_latest_loss),
    cmocka_unit_test(test_said_above_bar),
    cmocka_unit_test(test_bar_closed_stream),
    cmocka_unit_test(test_errors),
    cmocka_unit_test(test_rank1_writes_nothing),
    cmocka_unit_test(test_bad_parameters),
    cmocka_unit_test(test_no_link_following),
    cmocka_unit_test(test_version_never_replaces),
    cmocka_unit_test(test_parallel_versions),
    cmocka_unit_test(test_many_metrics),
    cmocka_unit_test(test_utf8_names),
    cmocka_unit_test(test_full_disk),
    cmocka_unit_test(test_csv_new_columns_linear),
    cmocka_unit_test(test_verbose_lines),
    cmocka_unit_test(test_lr_monitor_epoch),
    cmocka_unit_test(test_no_empty_csv),
  };
  if (argc == 3 && !strcmp(argv[1], "--keep")) { snprintf(g_root, sizeof g_root, "%s", argv[2]); return cmocka_run_group_tests(tests, NULL, NULL); }
  if (argc == 3 && !strcmp(argv[1], "--tb")) return mode_tb(argv[2]);
  if (argc == 3 && !strcmp(argv[1], "--tb-hparams")) return mode_tb_hparams(argv[2]);
  if (argc >= 2 && !strcmp(argv[1], "--bar")) return mode_bar(argc >= 3 ? atoi(argv[2]) : 20);
  if (argc == 4 && !strcmp(argv[1], "--bar-loop")) return mode_bar_loop(argv[2], atoi(argv[3]));
  if (argc == 3 && !strcmp(argv[1], "--crash")) return mode_crash(argv[2]);
  if (argc == 3 && !strcmp(argv[1], "--mpi-verbose")) return mode_mpi_verbose(argv[2]);
  if (argc == 2 && !strcmp(argv[1], "--print")) return mode_print();
  if (argc == 4 && !strcmp(argv[1], "--plot")) {
    char why[600];
    if (tr_plot_csv(argv[2], argv[3], NULL, why, sizeof why) == TR_OK) return 0;
    fprintf(stderr, "test_log --plot: %s\n", why);
    return 1;
  }
  return run_tests_in_dir(tests, "test_log", g_root); /* one test: TEST_ONLY=test_plot */
}
