/* tests/test_math.c - train.h's per-step math (the sections "PER-STEP MATH"): every pass bit for bit
   against tests/ref_f32.c, PyTorch's formulas as plain float32 C built with -ffp-contract=off; the
   reductions against hooks.h and against the documented summation order; the same bits for every
   thread count. Built by tests/math.mk plain, with -fopenmp (real threads) and with the sanitizers. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "ref_f32.h"

/* Sizes around every edge: empty, below and across the 16-wide blocks, around a chunk, several chunks. */
static const size_t sizes[] = { 0, 1, 7, 15, 16, 17, 33, 1000, HK_NORM_CHUNK - 1, HK_NORM_CHUNK,
                                HK_NORM_CHUNK + 1, 3 * HK_NORM_CHUNK + 5 };
#define N_SIZES (sizeof sizes / sizeof sizes[0])
#define MAX_N (3 * HK_NORM_CHUNK + 5)
static const int thread_counts[] = { 1, 2, 3, 7 };

/* Normal values with a few specials mixed in (zeros of both signs, denormals, huge and tiny). */
static void fill(float *x, size_t n, tr_rng *r, float scale, int specials) {
  size_t i;
  for (i = 0; i < n; i++) x[i] = scale * tr_rng_normal(r);
  if (!specials) return;
  for (i = 0; i < n; i += 97) {
    static const float odd[] = { 0.0f, -0.0f, 1e-40f, -3e-39f, 1e30f, -1e-30f, 65504.0f };
    x[i] = odd[(i / 97) % (sizeof odd / sizeof odd[0])];
  }
}

static float *buf(size_t n) {
  float *x = (float *)malloc((n ? n : 1) * sizeof(float));
  assert_non_null(x);
  return x;
}

#define ASSERT_BITS(a, b, n, what) do { \
  if ((n) && memcmp((a), (b), (n) * sizeof(float)) != 0) fail_msg("%s differs from the reference at n=%zu", (what), (size_t)(n)); \
} while (0)

/* AdamW: three steps (the bias corrections change) per size, both lerp forms, with and without weight
   decay and a folded clip scale, every thread count. */
static void test_adamw_bits(void **state) {
  static const double beta1s[] = { 0.9, 0.3 }, wds[] = { 0.0, 0.1 };
  float *p = buf(MAX_N), *g = buf(MAX_N), *m = buf(MAX_N), *v = buf(MAX_N);
  float *rp = buf(MAX_N), *rg = buf(MAX_N), *rm = buf(MAX_N), *rv = buf(MAX_N);
  size_t s, b, w, i;
  (void)state;
  for (s = 0; s < N_SIZES; s++)
    for (b = 0; b < 2; b++)
      for (w = 0; w < 2; w++) {
        size_t n = sizes[s];
        int th = thread_counts[(s + b + w) % 4];
        tr_optim o;
        tr_rng r;
        int k;
        memset(&o, 0, sizeof o);
        o.lr = 3e-3;
        o.beta1 = beta1s[b];
        o.beta2 = 0.999;
        o.eps = 1e-8;
        o.weight_decay = wds[w];
        tr_rng_seed(&r, 100 + s);
        fill(p, n, &r, 1.0f, 1);
        memcpy(rp, p, n * sizeof(float));
        memset(m, 0, n * sizeof(float)); memset(rm, 0, n * sizeof(float));
        memset(v, 0, n * sizeof(float)); memset(rv, 0, n * sizeof(float));
        for (k = 1; k <= 3; k++) {
          tr_adamw_coef c = tr_adamw_coefs(&o, o.lr, k);
          fill(g, n, &r, 0.1f, 1);
          c.gscale = k == 2 ? 0.37f : 1.0f; /* step 2 folds a clip scale into the update */
          for (i = 0; i < n; i++) rg[i] = g[i] * c.gscale;
          tr_adamw_update(p, g, m, v, n, &c, th);
          ref_adamw_f32(rp, rg, rm, rv, n, o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, k);
          ASSERT_BITS(g, rg, n, "AdamW's scaled gradient");
          ASSERT_BITS(p, rp, n, "AdamW's p");
          ASSERT_BITS(m, rm, n, "AdamW's m");
          ASSERT_BITS(v, rv, n, "AdamW's v");
        }
      }
  free(p); free(g); free(m); free(v); free(rp); free(rg); free(rm); free(rv);
}

/* SGD: plain, weight decay, momentum with dampening, Nesterov; first step and two more. */
static void test_sgd_bits(void **state) {
  static const struct { double mu, damp, wd; int nesterov; } cfg[] = {
    { 0, 0, 0, 0 }, { 0, 0, 1e-2, 0 }, { 0.9, 0.1, 1e-2, 0 }, { 0.9, 0, 1e-2, 1 }, { 0.5, 0, 0, 0 } };
  float *p = buf(MAX_N), *g = buf(MAX_N), *m = buf(MAX_N), *rp = buf(MAX_N), *rg = buf(MAX_N), *rm = buf(MAX_N);
  size_t s, j, i;
  (void)state;
  for (s = 0; s < N_SIZES; s++)
    for (j = 0; j < sizeof cfg / sizeof cfg[0]; j++) {
      size_t n = sizes[s];
      int th = thread_counts[(s + j) % 4], k;
      tr_optim o;
      tr_rng r;
      memset(&o, 0, sizeof o);
      o.kind = TR_OPTIM_SGD;
      o.lr = 1e-2;
      o.momentum = cfg[j].mu;
      o.dampening = cfg[j].damp;
      o.weight_decay = cfg[j].wd;
      o.nesterov = cfg[j].nesterov;
      tr_rng_seed(&r, 200 + s);
      fill(p, n, &r, 1.0f, 1);
      memcpy(rp, p, n * sizeof(float));
      for (k = 0; k < 3; k++) {
        tr_sgd_coef c = tr_sgd_coefs(&o, o.lr, k == 0);
        fill(g, n, &r, 0.1f, 1);
        c.gscale = k == 1 ? 0.5f : 1.0f;
        for (i = 0; i < n; i++) rg[i] = g[i] * c.gscale;
        tr_sgd_update(p, g, o.momentum != 0 ? m : NULL, n, &c, th);
        ref_sgd_f32(rp, rg, o.momentum != 0 ? rm : NULL, n, o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, k == 0);
        ASSERT_BITS(g, rg, n, "SGD's scaled gradient");
        ASSERT_BITS(p, rp, n, "SGD's p");
        if (o.momentum != 0) ASSERT_BITS(m, rm, n, "SGD's momentum buffer");
      }
    }
  free(p); free(g); free(m); free(rp); free(rg); free(rm);
}

/* hooks.h's documented order, written out independently: per chunk, accumulator j % 16, halving fold,
   chunk sums added in order. */
static double documented_sumsq(const float *x, size_t n) {
  double total = 0;
  size_t c, j, w;
  for (c = 0; c < n; c += HK_NORM_CHUNK) {
    double acc[16];
    size_t len = n - c < HK_NORM_CHUNK ? n - c : HK_NORM_CHUNK;
    memset(acc, 0, sizeof acc);
    for (j = 0; j < len; j++) acc[j % 16] += (double)x[c + j] * (double)x[c + j];
    for (w = 8; w >= 1; w /= 2)
      for (j = 0; j < w; j++) acc[j] += acc[j + w];
    total += acc[0];
  }
  return total;
}

/* The norm: hooks.h's hk_sumsq, train.h's threaded tr_sumsq and the documented order agree bit for
   bit, and the value is the sum of squares (against long double). */
static void test_sumsq(void **state) {
  float *x = buf(MAX_N);
  size_t s, t, i;
  (void)state;
  for (s = 0; s < N_SIZES; s++) {
    size_t n = sizes[s];
    long double exact = 0;
    double h;
    tr_rng r;
    tr_rng_seed(&r, 300 + s);
    fill(x, n, &r, 1.0f, 0);
    for (i = 0; i < n; i++) exact += (long double)x[i] * x[i];
    h = hk_sumsq(x, n);
    assert_true(h == documented_sumsq(x, n));
    if (n) assert_true(fabsl((long double)h - exact) <= 1e-13L * exact);
    else assert_true(h == 0.0);
    for (t = 0; t < 4; t++) assert_true(tr_sumsq(x, n, thread_counts[t]) == h);
  }
  free(x);
}

/* Clipping by value: the sum of squares before clipping, the clamped values (NaN stays NaN). */
static void test_clamp_sumsq(void **state) {
  float *x = buf(MAX_N), *y = buf(MAX_N);
  size_t s, i;
  (void)state;
  for (s = 0; s < N_SIZES; s++) {
    size_t n = sizes[s];
    double before, got;
    tr_rng r;
    tr_rng_seed(&r, 400 + s);
    fill(x, n, &r, 1.0f, 0);
    if (n > 5) { x[3] = NAN; x[4] = INFINITY; x[5] = -INFINITY; }
    memcpy(y, x, n * sizeof(float));
    before = hk_sumsq(x, n);
    got = tr_clamp_sumsq(x, n, -0.5f, 0.5f, thread_counts[s % 4]);
    assert_memory_equal(&got, &before, sizeof got); /* NaN when x held one: compare the bits */
    for (i = 0; i < n; i++) {
      float want = y[i] > 0.5f ? 0.5f : (y[i] < -0.5f ? -0.5f : y[i]);
      if (isnan(y[i])) assert_true(isnan(x[i]));
      else assert_true(x[i] == want);
    }
  }
  free(x); free(y);
}

/* zero, scale and the NaN/Inf scan against plain loops. */
static void test_zero_scale_count(void **state) {
  float *x = buf(MAX_N), *y = buf(MAX_N);
  size_t s, i;
  (void)state;
  for (s = 0; s < N_SIZES; s++) {
    size_t n = sizes[s], want = 0;
    int th = thread_counts[s % 4];
    tr_rng r;
    tr_rng_seed(&r, 500 + s);
    fill(x, n, &r, 1.0f, 1);
    memcpy(y, x, n * sizeof(float));
    tr_scale(x, n, 0.3f, th);
    for (i = 0; i < n; i++) y[i] *= 0.3f;
    ASSERT_BITS(x, y, n, "tr_scale");
    for (i = 0; i < n; i += 1 + i % 5000) x[i] = (i & 1) ? NAN : ((i & 2) ? INFINITY : -INFINITY);
    if (n) x[n - 1] = -NAN;
    for (i = 0; i < n; i++) want += !isfinite(x[i]);
    assert_int_equal(tr_count_nonfinite(x, n, th), want);
    tr_zero(x, n, th);
    for (i = 0; i < n; i++) assert_true(x[i] == 0.0f && !signbit(x[i]));
  }
  free(x); free(y);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_adamw_bits),
    cmocka_unit_test(test_sgd_bits),
    cmocka_unit_test(test_sumsq),
    cmocka_unit_test(test_clamp_sumsq),
    cmocka_unit_test(test_zero_scale_count),
  };
#ifdef _OPENMP
  printf("test_math: OpenMP on, thread counts 1, 2, 3, 7\n");
#else
  printf("test_math: no OpenMP (thread counts 1, 2, 3, 7 all run on one thread)\n");
#endif
  return cmocka_run_group_tests(tests, NULL, NULL);
}
