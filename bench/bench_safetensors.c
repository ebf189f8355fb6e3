/* bench/bench_safetensors.c - tr_safetensors_save's speed as a ratio to the disk's copy speed: a model of
   ST_BENCH_MB (default 64) MiB in 12 tensors written as .safetensors (atomic: temporary, fsync, rename), next
   to a copy of that same file (read, write, fsync: what cp and sync do), on the disk under the directory
   given. Median of 5 each. Goal: the ratio <= 1.25 (the writer adds a header and a rename, no copy). */
#define _POSIX_C_SOURCE 200809L
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#define BENCH_DISK
#include "train.h"
#include "bench.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : ".";
  size_t mb = getenv("ST_BENCH_MB") ? (size_t)atol(getenv("ST_BENCH_MB")) : 64, n = mb * 262144 / 12, i;
  float *p = (float *)malloc(12 * n * sizeof *p);
  hk_tensor v[12];
  char names[12][16], path[4200], copy[4200], why[600];
  double ts[5], tc[5], ws, cs, ratio;
  int k;
  if (!p) return 1;
  for (i = 0; i < 12 * n; i++) p[i] = (float)i;
  for (k = 0; k < 12; k++) {
    snprintf(names[k], sizeof names[k], "layer.%d", k);
    v[k].name = names[k]; v[k].data = p + (size_t)k * n; v[k].count = n; v[k].on_device = 0;
  }
  snprintf(path, sizeof path, "%s/bench.safetensors", dir);
  snprintf(copy, sizeof copy, "%s/bench.copy", dir);
  for (k = 0; k < 5; k++) {
    double t0 = bench_now();
    if (tr_safetensors_save(path, v, 12, NULL, NULL, why, sizeof why)) { fprintf(stderr, "%s\n", why); return 1; }
    ts[k] = bench_now() - t0;
    tc[k] = bench_copy_file(path, copy);
  }
  ws = bench_median(ts, 5);
  cs = bench_median(tc, 5);
  ratio = ws / cs;
  printf("| what (%zu MiB, 12 tensors) | tr_safetensors_save | copy of the file | ratio | goal | verdict |\n|---|---|---|---|---|---|\n", mb);
  printf("| write, fsync, rename | %.1f ms (%.0f MB/s) | %.1f ms (%.0f MB/s) | %.2f | <= 1.25 | %s |\n", 1e3 * ws,
         (double)mb * 1.048576 / ws, 1e3 * cs, (double)mb * 1.048576 / cs, ratio, ratio <= 1.25 ? "ok" : "slower");
  remove(path);
  remove(copy);
  free(p);
  return 0;
}
