/* tests/test_math.c - train.h's per-step math (the sections "PER-STEP MATH"): every pass bit for bit
   against tests/ref_f32.c, PyTorch's formulas as plain float32 C built with -ffp-contract=off; the
   reductions against hooks.h and against the documented summation order; the same bits for every
   thread count. Built by tests/math.mk plain, with -fopenmp (real threads) and with the sanitizers. */
#include <float.h>
#include "test.h"
#include "ref_f32.h"

/* Sizes around every edge: empty, below and across the 16-wide blocks, the prefetching loop's end,
   around a chunk, several chunks. */
static const size_t sizes[] = { 0, 1, 7, 15, 16, 17, 33, 1000, HK_NORM_CHUNK / 2 + 1, HK_NORM_CHUNK / 2 + 1043,
                                HK_NORM_CHUNK - 1, HK_NORM_CHUNK, HK_NORM_CHUNK + 1, 3 * HK_NORM_CHUNK + 5 };
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
  if ((n) != 0 && memcmp((a), (b), (n) * sizeof(float)) != 0) fail_msg("%s differs from the reference at n=%zu", (what), (size_t)(n)); \
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
    /* magnitudes from denormals to 2^60: the AVX kernel fuses the multiply-add, which gives the same
       bits only because a float's square is exact in double; this would catch a kernel that rounds it */
    for (i = 0; i < n; i++) x[i] = ldexpf(x[i], (int)tr_rng_below(&r, 211) - 150);
    h = hk_sumsq(x, n);
    assert_true(h == documented_sumsq(x, n));
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

/* The averaging folded into the norm's pass (ZeRO-1's step): the same bits as tr_scale, then tr_sumsq. */
static void test_scale_sumsq(void **state) {
  float *x = buf(MAX_N), *y = buf(MAX_N);
  size_t s;
  (void)state;
  for (s = 0; s < N_SIZES; s++) {
    size_t n = sizes[s];
    int th = thread_counts[s % 4];
    double want, got;
    tr_rng r;
    tr_rng_seed(&r, 450 + s);
    fill(x, n, &r, 3.0f, 1);
    if (n > 5) { x[3] = NAN; x[4] = INFINITY; }
    memcpy(y, x, n * sizeof(float));
    tr_scale(y, n, 1.0f / 3.0f, th);
    want = tr_sumsq(y, n, th);
    got = tr_scale_sumsq(x, n, 1.0f / 3.0f, th);
    assert_memory_equal(&got, &want, sizeof got);
    assert_memory_equal(x, y, n * sizeof(float));
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

/* A zero-initialised tr_optim means the defaults, as everywhere in train.h. */
static void test_coef_defaults(void **state) {
  tr_optim zero, full;
  tr_adamw_coef a, b;
  (void)state;
  memset(&zero, 0, sizeof zero);
  full = zero;
  full.beta1 = 0.9;
  full.beta2 = 0.999;
  full.eps = 1e-8;
  a = tr_adamw_coefs(&zero, 1e-3, 7);
  b = tr_adamw_coefs(&full, 1e-3, 7);
  assert_memory_equal(&a, &b, sizeof a);
  assert_true(a.lerp_small && !a.decays && a.gscale == 1.0f);
}

/* ---- the trainer: the same bits for every thread count, and clipping folded into the update --- */
#define TN (3 * HK_NORM_CHUNK + 123)
typedef struct tmodel { float *p, *g; int step; } tmodel;
static int t_forward(void *user, void *batch, int training, double *loss) {
  (void)user; (void)batch; (void)training;
  *loss = 1.0;
  return 0;
}
/* A gradient that changes with the step and the element, large enough that clipping acts. */
static int t_backward(void *user, void *batch) {
  tmodel *m = (tmodel *)user;
  size_t i;
  uint32_t h = 2166136261u ^ (uint32_t)m->step;
  (void)batch;
  for (i = 0; i < TN; i++) {
    h = h * 1664525u + 1013904223u;
    m->g[i] += ((float)(h >> 8) / 16777216.0f - 0.45f) + 0.001f * m->p[i];
  }
  m->step++;
  return 0;
}
static int64_t t_count(void *user) { (void)user; return 6; }
static int t_get(void *user, int64_t i, void **batch) { (void)i; *batch = user; return 0; }
static hk_signal t_clip_seen(hk_ctx *ctx, void *user) { (void)ctx; ++*(int *)user; return HK_CONTINUE; }

/* Train 6 steps (accumulating 2 micro-batches, so the averaging pass runs too); the parameters,
   optimizer state and gradients after it go to out (3 * TN floats). */
static void train_run(const tr_optim *o, double clip, tr_clip algo, int threads, int watch_clip, float *out) {
  tmodel m;
  tr_trainer t;
  tr_desc d;
  tr_config c;
  tr_data data;
  tr_tensor views[2] = { { "a", 0, 70001 }, { "b", 70001, TN - 70001 } };
  tr_rng r;
  size_t i;
  int clips = 0;
  m.p = buf(TN);
  m.g = buf(TN);
  m.step = 0;
  tr_rng_seed(&r, 9);
  for (i = 0; i < TN; i++) { m.p[i] = tr_rng_normal(&r); m.g[i] = 0; }
  memset(&d, 0, sizeof d);
  d.model.params = m.p;
  d.model.grads = m.g;
  d.model.n_params = TN;
  d.model.tensors = views;
  d.model.n_tensors = 2;
  d.model.user = &m;
  d.model.forward = t_forward;
  d.model.backward = t_backward;
  d.optim = *o;
  d.threads = threads;
  assert_int_equal(tr_init(&t, &d), TR_OK);
  if (watch_clip) assert_int_equal(hk_on(t.reg, HK_ON_GRADIENT_CLIP, t_clip_seen, &clips, NULL, NULL), HK_OK);
  data = test_data(t_count, t_get, &m);
  c = test_config(&data, NULL, 2);
  c.no_sigint = 0; /* the trainer's Ctrl-C handler on, as in a program */
  c.accumulate_grad_batches = 2;
  c.gradient_clip_val = clip;
  c.gradient_clip_algorithm = algo;
  c.no_sigint = 1;
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(t.global_step, 6);
  if (watch_clip) assert_int_equal(clips, clip > 0 ? 6 : 0);
  memcpy(out, m.p, TN * sizeof(float));
  memcpy(out + TN, t.tr__m ? t.tr__m : m.p, TN * sizeof(float));
  memcpy(out + 2 * TN, m.g, TN * sizeof(float));
  tr_free(&t);
  free(m.p);
  free(m.g);
}

static void test_trainer_threads(void **state) {
  static const struct { tr_optim_kind kind; double clip; tr_clip algo; } cfg[] = {
    { TR_OPTIM_ADAMW, 0, TR_CLIP_NORM }, { TR_OPTIM_ADAMW, 5.0, TR_CLIP_NORM }, { TR_OPTIM_ADAMW, 0.3, TR_CLIP_VALUE },
    { TR_OPTIM_SGD, 5.0, TR_CLIP_NORM }, { TR_OPTIM_SGD, 0.3, TR_CLIP_VALUE } };
  float *one = buf(3 * TN), *other = buf(3 * TN);
  size_t j, k;
  (void)state;
  for (j = 0; j < sizeof cfg / sizeof cfg[0]; j++) {
    tr_optim o;
    memset(&o, 0, sizeof o);
    o.kind = cfg[j].kind;
    o.lr = 1e-2;
    o.weight_decay = 0.01;
    o.momentum = cfg[j].kind == TR_OPTIM_SGD ? 0.9 : 0;
    train_run(&o, cfg[j].clip, cfg[j].algo, 1, 0, one);
    for (k = 1; k < 4; k++) {
      train_run(&o, cfg[j].clip, cfg[j].algo, thread_counts[k], 0, other);
      ASSERT_BITS(other, one, 3 * TN, "a run with more threads");
    }
    /* a hook on on_gradient_clip sees clipped gradients: clipping then scales in a pass of its own;
       without one the update folds the scale in. The same bits either way. */
    train_run(&o, cfg[j].clip, cfg[j].algo, 2, 1, other);
    ASSERT_BITS(other, one, 3 * TN, "a run with an on_gradient_clip hook");
  }
  free(one);
  free(other);
}

/* tr_desc.threads out of range is refused with a message naming it. */
static void test_bad_threads(void **state) {
  tr_trainer t;
  tr_desc d;
  float p[4], g[4];
  int bad[] = { -1, 4097 }, i;
  (void)state;
  for (i = 0; i < 2; i++) {
    memset(&d, 0, sizeof d);
    d.model.params = p;
    d.model.grads = g;
    d.model.n_params = 4;
    d.model.forward = t_forward;
    d.threads = bad[i];
    assert_int_equal(tr_init(&t, &d), TR_ERR_INVALID);
    assert_non_null(strstr(tr_error(&t), "threads"));
    tr_free(&t);
  }
}

/* zero_grad on a buffer far larger than the caches takes one memset per thread; from a start that is
   not 16-byte aligned, with a tail, leaving the neighbours alone. */
static void test_zero_large(void **state) {
  size_t n = ((size_t)1 << 23) + 37, i;
  float *x = buf(n + 2);
  int t;
  (void)state;
  for (t = 0; t < 2; t++) {
    for (i = 0; i < n + 2; i++) x[i] = 1.5f;
    tr_zero(x + 1, n, thread_counts[t]);
    assert_true(x[0] == 1.5f && x[n + 1] == 1.5f);
    for (i = 1; i <= n; i++) if (x[i] != 0.0f || signbit(x[i])) fail_msg("element %zu is not zero", i);
  }
  free(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_adamw_bits),
    cmocka_unit_test(test_sgd_bits),
    cmocka_unit_test(test_sumsq),
    cmocka_unit_test(test_clamp_sumsq),
    cmocka_unit_test(test_scale_sumsq),
    cmocka_unit_test(test_zero_scale_count),
    cmocka_unit_test(test_zero_large),
    cmocka_unit_test(test_coef_defaults),
    cmocka_unit_test(test_trainer_threads),
    cmocka_unit_test(test_bad_threads),
  };
#ifdef _OPENMP
  printf("test_math: OpenMP on, thread counts 1, 2, 3, 7\n");
#else
  printf("test_math: no OpenMP (thread counts 1, 2, 3, 7 all run on one thread)\n");
#endif
  return cmocka_run_group_tests(tests, NULL, NULL);
}
