/* bench/bench_predwriter.c - prediction_writer's cost when enabled, as a ratio to the disk's copy speed: tr_predict
   over PW_BENCH_FLOATS (default 10^7) predictions, 100 batches of [rows x 10], written by prediction_writer as csv
   and as safetensors (per epoch: one file; per batch: streamed csv, a file a batch), next to a copy of the file
   it wrote (read, write, fsync: what cp and sync do) and to the same predict run without the writer, on the disk
   under the directory given. Median of 3 each. The writer's time is the run's time minus the run without it. */
#define _POSIX_C_SOURCE 200809L
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#define BENCH_DISK
#include "train.h"
#include "bench.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define COLS 10
#define BATCHES 100
static int64_t g_rows; /* a batch's */
static float *g_vals;
static tr_predictions g_pred;

static int predict(void *u, void *batch, void **outputs) {
  (void)u;
  g_pred.values = g_vals + (size_t)(intptr_t)batch * (size_t)(g_rows * COLS);
  g_pred.rows = g_rows;
  g_pred.cols = COLS;
  *outputs = &g_pred;
  return 0;
}
static int fwd(void *u, void *b, int training, double *loss) { (void)u; (void)b; (void)training; *loss = 0; return 0; }
static int64_t count(void *u) { (void)u; return BATCHES; }
static int get(void *u, int64_t i, void **b) { (void)u; *b = (void *)(intptr_t)i; return 0; }

/* One tr_predict with spec (NULL: no writer): seconds. */
static double run(const char *spec) {
  static float p[1], g[1];
  tr_trainer t;
  tr_desc d;
  tr_data data;
  double t0;
  memset(&d, 0, sizeof d);
  d.model.params = p; d.model.grads = g; d.model.n_params = 1;
  d.model.forward = fwd; d.model.predict = predict;
  memset(&data, 0, sizeof data);
  data.count = count;
  data.get = get;
  if (tr_init(&t, &d) || (spec && hk_spec_apply(t.reg, spec))) { fprintf(stderr, "setup: %s\n", tr_error(&t)); exit(1); }
  t0 = bench_now();
  if (tr_predict(&t, &data, 0)) { fprintf(stderr, "%s\n", tr_error(&t)); exit(1); }
  t0 = bench_now() - t0;
  tr_free(&t);
  return t0;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : ".";
  int64_t n = getenv("PW_BENCH_FLOATS") ? atoll(getenv("PW_BENCH_FLOATS")) : 10000000, i;
  static const struct { const char *fmt, *interval, *file, *what; } cases[] = {
    { "safetensors", "epoch", "predictions.safetensors", "safetensors, epoch (one file)" },
    { "safetensors", "batch", "predictions-batch_0.safetensors", "safetensors, batch (100 files)" },
    { "csv", "epoch", "predictions.csv", "csv, epoch (one file)" },
    { "csv", "batch", "predictions.csv", "csv, batch (streamed)" },
  };
  char sub[4200], spec[4400], path[4400], copy[4400], cmd[4300];
  double base[3], base_s;
  int c, k;
  g_rows = n / COLS / BATCHES;
  if (g_rows < 1) g_rows = 1;
  n = g_rows * COLS * BATCHES;
  g_vals = (float *)malloc((size_t)n * sizeof *g_vals);
  if (!g_vals) return 1;
  for (i = 0; i < n; i++) g_vals[i] = (float)i / 7.0f; /* 9 significant digits in csv, as most predictions */
  for (k = 0; k < 3; k++) base[k] = run(NULL);
  base_s = bench_median(base, 3);
  printf("| %lld floats, 100 batches of [%lld x %d] | writer's time | file | copy of the file (cp + sync) | ratio | per float |\n"
         "|---|---|---|---|---|---|\n", (long long)n, (long long)g_rows, COLS);
  for (c = 0; c < 4; c++) {
    double tw[3], tc[3], w, cp, size = 0;
    struct stat st;
    snprintf(sub, sizeof sub, "%s/bench_pw%d", dir, c);
    snprintf(spec, sizeof spec, "prediction_writer(dirpath=%s, format=%s, write_interval=%s)", sub, cases[c].fmt, cases[c].interval);
    snprintf(path, sizeof path, "%s/%s", sub, cases[c].file);
    snprintf(copy, sizeof copy, "%s/copy", sub);
    for (k = 0; k < 3; k++) {
      snprintf(cmd, sizeof cmd, "rm -rf '%s'", sub); /* a new trainer's writer replaces no file of another run */
      if (system(cmd) != 0) return 1;
      tw[k] = run(spec) - base_s;
      if (stat(path, &st) != 0) { perror(path); return 1; }
      size = (double)st.st_size * (c == 1 ? BATCHES : 1); /* the batch files are all alike in size */
      tc[k] = bench_copy_file(path, copy) * (c == 1 ? BATCHES : 1);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", sub);
    if (system(cmd) != 0) return 1;
    w = bench_median(tw, 3);
    cp = bench_median(tc, 3);
    printf("| %s | %.0f ms | %.1f MB | %.0f ms (%.0f MB/s) | %.2f | %.1f ns |\n", cases[c].what, 1e3 * w, size / 1e6, 1e3 * cp,
           size / 1e6 / cp, w / cp, 1e9 * w / (double)n);
  }
  printf("(the predict run without the writer: %.0f ms; the copies: the writer's files copied the same way)\n", 1e3 * base_s);
  free(g_vals);
  return 0;
}
