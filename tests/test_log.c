/* tests/test_log.c - train.h's loggers, progress bar and plots (the LOGGERS AND PROGRESS BAR section).

   cmocka tests: CRC-32C against the published vectors and TensorBoard's golden records; the record
   API; on_log hooks that add, change and drop metrics; csv in Lightning's layout (columns, steps,
   empty cells, versions, hparams.yaml, a new column mid-run); jsonl parsed back; tensorboard records
   walked and checksummed; the plot and tr_plot_csv; tqdm's line; errors (unwritable directory, full
   disk) reported once without stopping training, or failing it with fail_on_error; rank 1 writes
   nothing; bad parameters.
   Modes used by tests/log.mk's scripts:
     test_log --tb DIR          write a TensorBoard run with known values (tests/tb_read.py checks them)
     test_log --bar             a short fit with the progress bar on stdout (tmux and pipe tests)
     test_log --crash DIR       log every step forever, slowly (killed with -9 by the crash test)
     test_log --plot CSV SVG    tr_plot_csv */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
#include <cmocka.h>
#ifdef __cplusplus
}
#endif

#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *p;
  long n;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  p = (char *)malloc((size_t)n + 1);
  if (fread(p, 1, (size_t)n, f) != (size_t)n) n = 0;
  p[n] = 0;
  fclose(f);
  if (len) *len = (size_t)n;
  return p;
}
static void subdir(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", g_root, name);
  mkdir(out, 0777);
}
static void assert_file(const char *path, const char *want) {
  char *got = slurp(path, NULL);
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
  char name[80];
  double v;
  int i;
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
  memset(name, 'x', sizeof name);
  name[TR_LOG_NAME_MAX] = 0; /* one byte too long */
  assert_int_equal(tr_log_set(&r, name, 1), TR_ERR_INVALID);
  for (i = r.n_metrics; i < TR_LOG_MAX_METRICS; i++) {
    snprintf(name, sizeof name, "m%d", i);
    assert_int_equal(tr_log_set(&r, name, i), TR_OK);
  }
  assert_int_equal(tr_log_set(&r, "one_more", 1), TR_ERR_NOMEM);
  assert_null(tr_log_current(NULL));
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
    char *csv = slurp(path, NULL), *line2;
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
  yaml = slurp(path, NULL);
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
  text = slurp(path, NULL);
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
  p = (unsigned char *)slurp(path, &n);
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
    if (find_bytes(p + pos + 12, (size_t)len, "\x0a\x07weights", 9)) hist++;
    records++;
    pos += 16 + (size_t)len;
  }
  assert_int_equal(records, 2 + 4 + 1); /* file_version, hparams, 4 train records, 1 validation */
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
  text = slurp(svg, NULL);
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
  text = slurp(svg, NULL);
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
}

/* ---- the bar as a callback: lines into a file, and a terminal's redraws --------------------------- */
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
  if (strncmp(text, "Sanity Checking: 100%|##########| 2/2 [00:00<", 45)) fail_msg("%s", text); /* the rate may be ? */
  assert_contains(text, "\nValidation: 100%|##########| 2/2 [");
  assert_contains(text, "loss=1.262, val/loss=0.5]\nEpoch 0: 100%|##########| 4/4 [");
  assert_contains(text, "loss=1.044, val/loss=0.6]\nEpoch 1: 100%|##########| 4/4 [");
  assert_contains(text, "\nValidation: 100%|##########| 2/2 [00:00<");  /* tr_validate's line */
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
  assert_contains(text, "\rSanity Checking: "); /* shown at its first due redraw (50% or, same microsecond, 100%) */
  assert_contains(text, "\r\033[K\rEpoch 0:   0%|"); /* the sanity check's line is erased */
  assert_contains(text, "\n\rValidation: ");
  assert_contains(text, "\r\033[K\033[A\rEpoch 0: 100%|");
  assert_int_equal(text[len - 1], '\n');         /* on_train_end leaves the line */
  assert_null(strstr(text, "\n\n"));
  tr_free(&t);
  fclose(out);
  free(text);
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

  /* a full disk: metrics.csv is /dev/full */
  snprintf(path, sizeof path, "%s/full/lightning_logs/v", dir);
  assert_int_equal(tr__mkdirs(path), 0);
  strcat(path, "/metrics.csv");
  assert_int_equal(symlink("/dev/full", path), 0);
  rewind(log);
  toy_init(&t, &m, log);
  snprintf(path, sizeof path, "%s/full", dir);
  assert_int_equal(tr_csv_logger(t.reg, &(tr_logger_desc){ .save_dir = path, .version = "v" }, &h), TR_OK);
  assert_int_equal(toy_fit(&t, &m, 1, 1), TR_OK);
  fflush(log);
  assert_contains(log_text, "csv: cannot write ");
  assert_contains(log_text, "No space left on device; this logger writes nothing more");
  tr_free(&t);

  /* fail_on_error: the run fails with the reason */
  toy_init(&t, &m, log);
  assert_int_equal(hk_spec_apply(t.reg, "jsonl(save_dir=\"/dev/null/x\", fail_on_error=true)"), HK_OK);
  e = toy_fit(&t, &m, 1, 1);
  assert_int_equal(e, TR_ERR_HOOK);
  assert_contains(tr_error(&t), "jsonl logger: cannot create the directory /dev/null/x/lightning_logs/version_0");
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
  assert_int_equal(hk_count(t.reg, HK_ON_LOG), 0); /* nothing was registered */
  assert_int_equal(tr_log_histogram(&t.ctx, "", NULL, 0), TR_ERR_INVALID);
  tr_free(&t);
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
  for (step = 0; step < 10; step++) {
    memset(&r, 0, sizeof r);
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
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  return 0;
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
  if (tr_fit(&t, &(tr_config){ .train = &train, .val = &val, .max_epochs = 3, .log_every_n_steps = 2 })) return 1;
  printf("done\n");
  tr_free(&t);
  return 0;
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

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_crc32c),
    cmocka_unit_test(test_record_api),
    cmocka_unit_test(test_csv_layout),
    cmocka_unit_test(test_jsonl),
    cmocka_unit_test(test_tensorboard),
    cmocka_unit_test(test_histogram_waits),
    cmocka_unit_test(test_histogram_bins),
    cmocka_unit_test(test_gradient_monitor_histogram),
    cmocka_unit_test(test_plot),
    cmocka_unit_test(test_bar_format),
    cmocka_unit_test(test_bar_callback),
    cmocka_unit_test(test_errors),
    cmocka_unit_test(test_rank1_writes_nothing),
    cmocka_unit_test(test_bad_parameters),
  };
  char tmpl[] = "/tmp/test_log.XXXXXX", cmd[300];
  int rc;
  if (argc == 3 && !strcmp(argv[1], "--keep")) { snprintf(g_root, sizeof g_root, "%s", argv[2]); return cmocka_run_group_tests(tests, NULL, NULL); }
  if (argc == 3 && !strcmp(argv[1], "--tb")) return mode_tb(argv[2]);
  if (argc >= 2 && !strcmp(argv[1], "--bar")) return mode_bar(argc >= 3 ? atoi(argv[2]) : 20);
  if (argc == 3 && !strcmp(argv[1], "--crash")) return mode_crash(argv[2]);
  if (argc == 4 && !strcmp(argv[1], "--plot")) {
    char why[600];
    if (tr_plot_csv(argv[2], argv[3], NULL, why, sizeof why) == TR_OK) return 0;
    fprintf(stderr, "test_log --plot: %s\n", why);
    return 1;
  }
  if (!mkdtemp(tmpl)) return 2;
  snprintf(g_root, sizeof g_root, "%s", tmpl);
  rc = cmocka_run_group_tests(tests, NULL, NULL);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
  if (rc == 0 && system(cmd) != 0) rc = 1;
  return rc;
}
