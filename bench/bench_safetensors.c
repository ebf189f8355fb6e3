/* bench/bench_safetensors.c - tr_safetensors_save's speed as a ratio to the disk's copy speed: a model of
   ST_BENCH_MB (default 64) MiB in 12 tensors written as .safetensors (atomic: temporary, fsync, rename), next
   to a copy of that same file (read, write, fsync: what cp and sync do), on the disk under the directory
   given. Median of 5 each. Goal: the ratio <= 1.25 (the writer adds a header and a rename, no copy). */
#define _POSIX_C_SOURCE 200809L
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static double copy_file(const char *from, const char *to) {
  static char buf[1 << 20];
  double t0 = now();
  int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ssize_t n;
  if (in < 0 || out < 0) { perror("copy"); exit(1); }
  while ((n = read(in, buf, sizeof buf)) > 0) if (write(out, buf, (size_t)n) != n) { perror("write"); exit(1); }
  if (fsync(out) != 0) { perror("fsync"); exit(1); }
  close(in);
  close(out);
  return now() - t0;
}
int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : ".";
  size_t mb = getenv("ST_BENCH_MB") ? (size_t)atol(getenv("ST_BENCH_MB")) : 64, n = mb * 262144 / 12, i;
  float *p = (float *)malloc(12 * n * sizeof *p);
  hk_tensor v[12];
  char names[12][16], path[4200], copy[4200], why[600];
  double ts[5], tc[5], ratio;
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
    double t0 = now();
    if (tr_safetensors_save(path, v, 12, NULL, NULL, why, sizeof why)) { fprintf(stderr, "%s\n", why); return 1; }
    ts[k] = now() - t0;
    tc[k] = copy_file(path, copy);
  }
  qsort(ts, 5, sizeof *ts, cmp);
  qsort(tc, 5, sizeof *tc, cmp);
  ratio = ts[2] / tc[2];
  printf("| what (%zu MiB, 12 tensors) | tr_safetensors_save | copy of the file | ratio | goal | verdict |\n|---|---|---|---|---|---|\n", mb);
  printf("| write, fsync, rename | %.1f ms (%.0f MB/s) | %.1f ms (%.0f MB/s) | %.2f | <= 1.25 | %s |\n", 1e3 * ts[2],
         (double)mb * 1.048576 / ts[2], 1e3 * tc[2], (double)mb * 1.048576 / tc[2], ratio, ratio <= 1.25 ? "ok" : "slower");
  remove(path);
  remove(copy);
  free(p);
  return 0;
}
