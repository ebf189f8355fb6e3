/* math_bench.c - train.h's per-step passes against a STREAM triad measured in the same run.

   For 1M and 16M parameters, with 1 and 2 threads: milliseconds per call, the bytes each pass moves
   per second, and that rate as a fraction of a triad (a[i] = b[i] + s*c[i], 12 bytes an element)
   timed in the same rounds with the same thread count. Bytes are counted honestly: every array a
   pass reads plus every array it writes (AdamW reads p, g, m, v and writes p, m, v: 28 bytes an
   element). Each number is the best of interleaved rounds (every pass once per round, in turn), so
   the triad and the passes see the same machine state.

   Built with the README's default flags (-O2, nothing machine-specific) plus -fopenmp for the thread
   rows (bench/math_bench.mk). Usage: math_bench [rounds]  (make bench-math) */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The triad, chunked and split over threads like train.h's passes; the inner block of 16 has a
   constant trip count so that gcc -O2 vectorises it (a fair, fast reference). */
static void triad(float *a, const float *b, const float *c, size_t n, float s, int threads) {
  long k, nk = (long)((n + HK_NORM_CHUNK - 1) / HK_NORM_CHUNK);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads > 1 ? threads : 1)
#endif
  for (k = 0; k < nk; k++) {
    size_t i = (size_t)k * HK_NORM_CHUNK, end = i + HK_NORM_CHUNK < n ? i + HK_NORM_CHUNK : n, j;
    for (; i + 16 <= end; i += 16)
      for (j = 0; j < 16; j++) a[i + j] = b[i + j] + s * c[i + j];
    for (; i < end; i++) a[i] = b[i] + s * c[i];
  }
  (void)threads;
}

typedef struct arrays { float *p, *g, *m, *v, *x; size_t n; } arrays;

#define PASSES(X) /* X(id, label, bytes per element) */ \
  X(TRIAD,  "triad a = b + s*c (reference)",       12) \
  X(ADAMW,  "AdamW update",                         28) \
  X(ADAMWC, "AdamW update + clip scale folded in",  32) \
  X(SGD,    "SGD update (plain)",                   12) \
  X(SGDM,   "SGD update (momentum, Nesterov, wd)",  20) \
  X(ZERO,   "zero_grad",                             4) \
  X(SCALE,  "scale (clip by norm / averaging)",      8) \
  X(NORM,   "gradient norm (sum of squares)",        4) \
  X(CLAMP,  "clip by value + norm",                  8) \
  X(SCAN,   "NaN/Inf scan",                          4)
enum {
#define X(id, label, bytes) P_##id,
  PASSES(X)
#undef X
  N_PASSES
};
static const char *labels[] = {
#define X(id, label, bytes) label,
  PASSES(X)
#undef X
};
static const int bytes_per[] = {
#define X(id, label, bytes) bytes,
  PASSES(X)
#undef X
};

static volatile double sink; /* keeps the reductions' results alive */

static void run_pass(int pass, arrays *a, int threads, int round) {
  tr_optim adamw = { TR_OPTIM_ADAMW, 1e-3, 0.01, 0, 0, 0, 0.9, 0.999, 1e-8 };
  tr_optim sgd = { TR_OPTIM_SGD, 1e-3, 1e-4, 0.9, 0, 1, 0, 0, 0 };
  tr_optim plain = { TR_OPTIM_SGD, 1e-3, 0, 0, 0, 0, 0, 0, 0 };
  size_t n = a->n;
  switch (pass) {
  case P_TRIAD: triad(a->x, a->p, a->g, n, 0.5f, threads); break;
  case P_ADAMW: case P_ADAMWC: {
    tr_adamw_coef c = tr_adamw_coefs(&adamw, adamw.lr, 10 + round);
    if (pass == P_ADAMWC) c.gscale = (round & 1) ? 0.5f : 2.0f; /* exact: g keeps its magnitude */
    tr_adamw_update(a->p, a->g, a->m, a->v, n, &c, threads);
    break;
  }
  case P_SGD: { tr_sgd_coef c = tr_sgd_coefs(&plain, plain.lr, 0); tr_sgd_update(a->p, a->g, NULL, n, &c, threads); break; }
  case P_SGDM: { tr_sgd_coef c = tr_sgd_coefs(&sgd, sgd.lr, round == 0); tr_sgd_update(a->p, a->g, a->m, n, &c, threads); break; }
  case P_ZERO: tr_zero(a->x, n, threads); break;
  case P_SCALE: tr_scale(a->x, n, (round & 1) ? 0.5f : 2.0f, threads); break;
  case P_NORM: sink = tr_sumsq(a->g, n, threads); break;
  case P_CLAMP: sink = tr_clamp_sumsq(a->v, n, -1.0f, 1.0f, threads); break;
  case P_SCAN: sink = (double)tr_count_nonfinite(a->g, n, threads); break;
  }
}

static float *make(size_t n, tr_rng *r, float scale) {
  float *x = (float *)malloc(n * sizeof(float));
  size_t i;
  if (!x) { fprintf(stderr, "math_bench: out of memory for %zu floats\n", n); exit(1); }
  for (i = 0; i < n; i++) x[i] = scale * tr_rng_normal(r);
  return x;
}

int main(int argc, char **argv) {
  static const size_t sizes[] = { (size_t)1 << 20, (size_t)1 << 24 };
  static const int threads[] = { 1, 2 };
  int rounds = argc > 1 ? atoi(argv[1]) : 0;
  size_t si;
  int ti, worst_ok = 1;
  tr_rng r;
  tr_rng_seed(&r, 1);
#ifdef _OPENMP
  printf("train.h per-step passes vs a same-run STREAM triad (OpenMP on)\n");
#else
  printf("train.h per-step passes vs a same-run STREAM triad (no OpenMP: the 2-thread rows run on one)\n");
#endif
  for (si = 0; si < 2; si++) {
    arrays a;
    a.n = sizes[si];
    a.p = make(a.n, &r, 1.0f);
    a.g = make(a.n, &r, 0.1f);
    a.m = make(a.n, &r, 0.01f);
    a.v = make(a.n, &r, 0.001f);
    a.x = make(a.n, &r, 1.0f);
    for (size_t i = 0; i < a.n; i++) a.v[i] *= a.v[i]; /* v >= 0, as AdamW keeps it */
    for (ti = 0; ti < 2; ti++) {
      double best[N_PASSES];
      int k, pass, nr = rounds > 0 ? rounds : (si == 0 ? 60 : 12);
      for (pass = 0; pass < N_PASSES; pass++) best[pass] = 1e30;
      for (pass = 0; pass < N_PASSES; pass++) run_pass(pass, &a, threads[ti], 0); /* warm up, fault pages in */
      for (k = 1; k <= nr; k++)
        for (pass = 0; pass < N_PASSES; pass++) {
          double t0 = now_s(), dt;
          run_pass(pass, &a, threads[ti], k);
          dt = now_s() - t0;
          if (dt < best[pass]) best[pass] = dt;
        }
      printf("\n%zuM parameters, %d thread%s (best of %d rounds)\n", a.n >> 20, threads[ti], threads[ti] > 1 ? "s" : "", nr);
      printf("| pass | bytes/param | ms | GB/s | vs triad |\n|---|---|---|---|---|\n");
      for (pass = 0; pass < N_PASSES; pass++) {
        double gbs = (double)bytes_per[pass] * (double)a.n / best[pass] / 1e9;
        double ratio = gbs / ((double)bytes_per[P_TRIAD] * (double)a.n / best[P_TRIAD] / 1e9);
        printf("| %s | %d | %.3f | %.1f | %.0f%% |\n", labels[pass], bytes_per[pass], best[pass] * 1e3, gbs, 100 * ratio);
        if (si == 1 && ti == 0 && pass != P_TRIAD && ratio < 0.9) worst_ok = 0;
      }
    }
    free(a.p); free(a.g); free(a.m); free(a.v); free(a.x);
  }
  printf("\nspeed goal (each pass >= 90%% of the triad at 16M, one thread): %s\n", worst_ok ? "met" : "NOT met");
  return 0;
}
