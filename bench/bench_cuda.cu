/* bench/bench_cuda.cu - every kernel of kernels/train_cuda.cuh at 1e8 parameters (make cuda-bench).

   Each kernel's bandwidth = the bytes it must move (each float read or written once, the byte model in
   the table: AdamW reads p, g, m, v and writes p, m, v = 28 B per parameter) / its time, as a RATIO of a
   device-to-device copy's of the same n floats measured in the same run (reads n + writes n = 8 B):
   the copy is what this GPU's memory actually delivers, so the ratio is the kernel's efficiency. Goal:
   AdamW, SGD and the norm at >= 0.85 of the copy; the verdict column says whether each row meets it.
   Times are the mean of REPS launches after WARMUP, by CUDA events. The other goals of the CUDA path
   (no host wait in a step with nothing registered, the MLP on the GPU against the CPU run) are checked
   by make cuda-test; scripts/gpu_check.sh puts them in its summary next to this table.
   Without a CUDA device: "skipped: no CUDA device" and exit 0. */
#define TRAIN_CUDA            /* train.h's implementation brings the kernels' (and tr_adamw_coefs) */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WARMUP = 3, REPS = 20 };
static size_t n = 100000000;
static cudaEvent_t t0, t1;

#define CU(x) do { cudaError_t e_ = (cudaError_t)(x); if (e_) { fprintf(stderr, "bench_cuda: %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

/* Milliseconds per call of the statement, averaged. */
#define TIME(ms, stmt) do { \
    for (int w_ = 0; w_ < WARMUP; w_++) CU(stmt); \
    CU(cudaEventRecord(t0)); \
    for (int r_ = 0; r_ < REPS; r_++) CU(stmt); \
    CU(cudaEventRecord(t1)); CU(cudaEventSynchronize(t1)); \
    float total_; CU(cudaEventElapsedTime(&total_, t0, t1)); (ms) = total_ / REPS; } while (0)

static double copy_gbs;
static int goals, met;
/* One row: name, the byte model (bytes per parameter and which arrays), the time, the goal (0: none). */
static void row(const char *name, int bytes, const char *model, double ms, double goal) {
  double gbs = bytes * (double)n / (ms * 1e-3) / 1e9, ratio;
  char g[16] = "-";
  const char *verdict = "-";
  if (copy_gbs == 0) copy_gbs = gbs; /* the first row is the copy */
  ratio = gbs / copy_gbs;
  if (goal > 0) {
    snprintf(g, sizeof g, ">= %.2f", goal);
    goals++;
    met += ratio >= goal;
    verdict = ratio >= goal ? "meets" : "MISSES";
  }
  printf("| %-30s | %2d = %-24s | %8.3f | %6.0f | %5.2f | %-7s | %-7s |\n", name, bytes, model, ms, gbs, ratio, g, verdict);
}

int main(int argc, char **argv) {
  char why[256];
  cudaDeviceProp prop;
  float *p, *g, *m, *v, *dst, ms;
  double *partials;
  trc_ctrl *ctrl;
  unsigned long long *counts;
  if (argc > 1) n = (size_t)atof(argv[1]);
  if (!trc_device_ok(why, sizeof why)) { printf("bench_cuda: skipped: no CUDA device (%s)\n", why); return 0; }
  CU(cudaGetDeviceProperties(&prop, 0));
  CU(cudaMalloc(&p, n * 4)); CU(cudaMalloc(&g, n * 4)); CU(cudaMalloc(&m, n * 4)); CU(cudaMalloc(&v, n * 4));
  CU(cudaMalloc(&dst, n * 4)); CU(cudaMalloc(&partials, TRC_NORM_BLOCKS * 8)); CU(cudaMalloc(&ctrl, sizeof *ctrl));
  CU(cudaMalloc(&counts, (64 + 3) * 8));
  CU(cudaMemset(p, 0, n * 4)); CU(cudaMemset(m, 0, n * 4)); CU(cudaMemset(v, 0, n * 4));
  CU(trc_memset(g, 0x3c, n * 4, NULL)); /* 0x3c3c3c3c ~ 0.0115: finite, so no skip and no NaN path */
  CU(cudaEventCreate(&t0)); CU(cudaEventCreate(&t1));
  CU(trc_norm(g, n, partials, ctrl, 1e30, 0, NULL)); /* clip_scale 1: the folded update writes no gradient */

  printf("kernels/train_cuda.cuh at n = %.3g parameters (fp32) on %s (%d SMs), mean of %d runs\n\n", (double)n, prop.name,
         prop.multiProcessorCount, REPS);
  printf("| kernel                         | bytes/param: read, write      |       ms |   GB/s | ratio | goal    | verdict |\n");
  printf("|--------------------------------|-------------------------------|----------|--------|-------|---------|---------|\n");
  TIME(ms, cudaMemcpyAsync(dst, g, n * 4, cudaMemcpyDeviceToDevice)); row("device-to-device copy", 8, "r src, w dst", ms, 0);
  tr_optim ao, so;
  memset(&ao, 0, sizeof ao);
  ao.kind = TR_OPTIM_ADAMW; ao.lr = 1e-3; ao.weight_decay = 0.01; ao.beta1 = 0.9; ao.beta2 = 0.999; ao.eps = 1e-8;
  tr_adamw_coef a = tr_adamw_coefs(&ao, ao.lr, 10);
  TIME(ms, trc_adamw(p, g, m, v, n, a, NULL, NULL)); row("AdamW", 28, "r p g m v, w p m v", ms, 0.85);
  TIME(ms, trc_adamw(p, g, m, v, n, a, ctrl, NULL)); row("AdamW + clip scale (no clip)", 28, "r p g m v, w p m v", ms, 0.85);
  TIME(ms, (trc_norm(g, n, partials, ctrl, 1e30, 0, NULL), trc_adamw(p, g, m, v, n, a, ctrl, NULL)));
  row("norm + AdamW (clip not hit)", 32, "r g; r p g m v, w p m v", ms, 0);
  so = ao;
  so.kind = TR_OPTIM_SGD; so.lr = 1e-2; so.weight_decay = 1e-4; so.momentum = 0.9;
  tr_sgd_coef s = tr_sgd_coefs(&so, so.lr, 0);
  TIME(ms, trc_sgd(p, g, m, n, s, NULL, NULL)); row("SGD momentum", 20, "r p g b, w p b", ms, 0.85);
  so.momentum = so.weight_decay = 0;
  s = tr_sgd_coefs(&so, so.lr, 0);
  TIME(ms, trc_sgd(p, g, NULL, n, s, NULL, NULL)); row("SGD plain", 12, "r p g, w p", ms, 0.85);
  TIME(ms, trc_norm(g, n, partials, ctrl, 1.0, 0, NULL)); row("norm (+ clip scale, NaN flag)", 4, "r g", ms, 0.85);
  TIME(ms, trc_count_nonfinite(g, n, counts, NULL)); row("NaN/Inf scan", 4, "r g", ms, 0);
  TIME(ms, trc_histogram(g, n, -1.0f, 1.0f, 64, counts, NULL)); row("histogram (64 bins)", 4, "r g", ms, 0);
  TIME(ms, trc_scale(g, n, 1.0f, NULL)); row("scale (accumulation mean)", 8, "r g, w g", ms, 0);
  TIME(ms, trc_clip_value(g, n, 1.0f, partials, ctrl, NULL)); row("clip by value (+ norm)", 8, "r g, w g", ms, 0);
  TIME(ms, trc_zero(dst, n, NULL)); row("zero_grad (memset)", 4, "w g", ms, 0);
  TIME(ms, trc_ema(m, p, n, 0.001, NULL)); row("EMA of the weights (double)", 12, "r avg p, w avg", ms, 0);
  TIME(ms, trc_swap(p, m, n, NULL)); row("swap (EMA's weights in, out)", 16, "r a b, w a b", ms, 0);
  printf("\nbytes/param: what each kernel must read (r) and write (w) per parameter, each float once (b: SGD's "
         "momentum buffer); GB/s counts those bytes, ratio = GB/s / the copy's. AdamW with clipping folded in "
         "moves 28 bytes instead of 36 (a separate clip pass reads and writes g once more).\n");
  printf("goals met: %d of %d rows (ratio to the copy >= goal)\n", met, goals);
  return 0;
}
