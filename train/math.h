/* train/math.h - the per-step math at memory speed: AdamW, SGD, zero_grad, clipping, norms. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_MATH_H /* part */
#define TRAIN_MATH_H /* part */
#include "base.h" /* part */

TR__C_BEGIN /* part */
/* =================================================================================================
   PER-STEP MATH
   Every pass a step makes over parameters and gradients (AdamW, SGD, zero_grad, scale, clipping, the
   norm, the NaN/Inf scan), public for hand-written loops. Float32 in PyTorch's single-tensor order, bit
   for bit against tests/ref_f32.c (no FMA: build with contraction off); the same bits for any thread
   count (fixed chunks, sums in chunk order, equal to hk_grad_norm); vectorised at -O2, at 0.9 or more of
   the memory's limit (make bench-math). tr_adamw_elem / tr_sgd_elem are the one definition of the
   formulas, for CUDA too (TR__HD). The formulas beside PyTorch's: docs/trainer.md ("The optimizers'
   arithmetic"); the speeds: docs/numbers.md. */
#if defined(__CUDACC__)
#  define TR__HD __host__ __device__
#else
#  define TR__HD
#endif

/* One AdamW step's scalars (tr_adamw_coefs), each rounded to float once. */
typedef struct tr_adamw_coef {
  float decay;      /* 1 - lr*wd */
  float w1;         /* 1 - beta1, the lerp weight of m */
  float w1_comp;    /* 1 - w1 in float: lerp's other form, used when w1 >= 0.5 */
  float beta2, w2;  /* beta2 and 1 - beta2 */
  float bc2_sqrt;   /* sqrt(1 - beta2^t) */
  float eps;
  float neg_step;   /* -lr / (1 - beta1^t) */
  float gscale;     /* the gradient is multiplied by this first (and stored back) unless it is 1:
                       clipping by norm folded into the update */
  int decays;       /* wd != 0 (PyTorch multiplies by 1 - lr*wd = 1 then, which changes nothing) */
  int lerp_small;   /* w1 < 0.5: lerp's first form */
} tr_adamw_coef;

/* One SGD step's scalars (tr_sgd_coefs). */
typedef struct tr_sgd_coef {
  float wd, momentum, damp1; /* damp1 = 1 - dampening */
  float neg_lr;
  float gscale;     /* as in tr_adamw_coef */
  int decays;       /* wd != 0 */
  int has_momentum; /* momentum != 0: the buffer is read and written */
  int first;        /* the momentum buffer is empty: it takes d as it is (PyTorch's clone) */
  int nesterov;
} tr_sgd_coef;

/* AdamW's coefficients for step `step` (from 1) at lr, and SGD's (first: empty momentum buffer). gscale
   starts at 1; zero fields of o mean tr_optim's defaults; o->lr is not read. */
TRAIN_API tr_adamw_coef tr_adamw_coefs(const tr_optim *o, double lr, int64_t step);
TRAIN_API tr_sgd_coef   tr_sgd_coefs(const tr_optim *o, double lr, int first);

/* One element of AdamW (g already scaled). The int fields of c and small only choose a form: a loop
   that fixes them has no branch left. */
TR__HD static inline void tr_adamw_elem(float *p, float g, float *m, float *v, tr_adamw_coef c, int small) {
  float pi = c.decays ? *p * c.decay : *p;
  float mi = small ? *m + c.w1 * (g - *m) : g - (g - *m) * c.w1_comp; /* PyTorch's lerp */
  float vi = *v * c.beta2 + (c.w2 * g) * g;
  float d = sqrtf(vi) / c.bc2_sqrt + c.eps;
  *p = pi + (c.neg_step * mi) / d;
  *m = mi;
  *v = vi;
}

/* One element of SGD (g already scaled); buf is read and written only when c.has_momentum. */
TR__HD static inline void tr_sgd_elem(float *p, float g, float *buf, tr_sgd_coef c) {
  float d = c.decays ? g + c.wd * *p : g;
  if (c.has_momentum) {
    float b = c.first ? d : *buf * c.momentum + c.damp1 * d;
    *buf = b;
    d = c.nesterov ? d + c.momentum * b : b;
  }
  *p = *p + c.neg_lr * d;
}

/* The passes over n elements on `threads` threads (0 or 1: the caller's). g is written only when
   c->gscale != 1 (the scaled gradient, as after a separate clip). */
TRAIN_API void   tr_adamw_update(float *p, float *g, float *m, float *v, size_t n, const tr_adamw_coef *c, int threads);
TRAIN_API void   tr_sgd_update(float *p, float *g, float *buf, size_t n, const tr_sgd_coef *c, int threads);
TRAIN_API void   tr_zero(float *x, size_t n, int threads);                  /* x = 0 */
TRAIN_API void   tr_scale(float *x, size_t n, float k, int threads);        /* x = x * k */
/* hk_sumsq(x, n) (the same bits), computed with threads. */
TRAIN_API double tr_sumsq(const float *x, size_t n, int threads);
/* Clamp x into [lo, hi] and return hk_sumsq of x before it (NaN stays): value clipping and its norm. */
TRAIN_API double tr_clamp_sumsq(float *x, size_t n, float lo, float hi, int threads);
/* x *= s and return hk_sumsq of the result: tr_scale and tr_sumsq in one pass, the same bits. */
TRAIN_API double tr_scale_sumsq(float *x, size_t n, float s, int threads);
/* How many of x are NaN or infinite, tested on the bits (so -ffast-math builds still see them). */
TRAIN_API size_t tr_count_nonfinite(const float *x, size_t n, int threads);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
/* the kernels come with the implementation (train/trainer/cuda.h) after the formulas they run: this file is built by nvcc */
#ifdef TRAIN_CUDA
#  ifndef TRAIN_CUDA_NO_KERNELS /* the program links its own trc_* functions (tests/cuda_host.h: on the CPU) */
#    define TRAIN_CUDA_IMPLEMENTATION
#  endif
#  include "kernels/train_cuda.cuh"
#endif
TR__C_BEGIN /* part */
/* =================================================================================================
   PER-STEP MATH (CPU kernels)
   Chunks of HK_NORM_CHUNK elements (256 KiB: one stays in L2) handed whole to OpenMP threads; one partial
   per chunk, added in chunk order. No allocation: partials on the stack, TR__GROUP chunks at a time.
   ================================================================================================= */
#if defined(__cplusplus) || !defined(__STDC_VERSION__) || __STDC_VERSION__ < 199901L
#  define TR__RESTRICT __restrict
#else
#  define TR__RESTRICT restrict
#endif
/* x86-64: AdamW's SSE and AVX kernels (AVX chosen at run time); with gcc and glibc the other loops get an
   AVX2 copy (target_clones: a plain -O2 build runs AVX2 where the CPU has it). */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(TRAIN_NO_SIMD)
#  include <immintrin.h>
#  define TR__X86 1
#  ifdef TRAIN_NO_AVX
static int tr__has_avx(void) { return 0; }
#  else
static int tr__has_avx(void) { return __builtin_cpu_supports("avx"); }
#  endif
#else
#  define TR__X86 0
#endif
#if TR__X86 && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__) /* ifunc: glibc's loader */
#  define TR__CLONES __attribute__((target_clones("avx2", "default")))
#else
#  define TR__CLONES
#endif
#define TR__AHEAD 1024
#if defined(__GNUC__) || defined(__clang__)
#  define TR__PREFETCH(p) __builtin_prefetch(p)
#else
#  define TR__PREFETCH(p) ((void)0)
#endif
#define TR__PRAGMA(x) _Pragma(#x)
#ifdef _OPENMP /* whole chunks per thread; no team at all for one thread */
#  define TR__FOR_CHUNKS(threads) TR__PRAGMA(omp parallel for schedule(static) num_threads((threads) > 1 ? (threads) : 1) if((threads) > 1))
#else
#  define TR__FOR_CHUNKS(threads) (void)(threads);
#endif
#define TR__CHUNK ((size_t)HK_NORM_CHUNK)
#define TR__GROUP 256 /* chunks per round of partials (2 KiB of stack) */

/* The elements of chunk k of an n-element array: [k*TR__CHUNK, +tr__chunk_len). */
static size_t tr__chunk_len(size_t n, size_t k) { return n - k * TR__CHUNK < TR__CHUNK ? n - k * TR__CHUNK : TR__CHUNK; }
static long tr__n_chunks(size_t n) { return (long)((n + TR__CHUNK - 1) / TR__CHUNK); }

TRAIN_API tr_adamw_coef tr_adamw_coefs(const tr_optim *o, double lr, int64_t step) {
  tr_adamw_coef c;
  double b1 = o->beta1 ? o->beta1 : 0.9, b2 = o->beta2 ? o->beta2 : 0.999; /* tr_optim's zeros, as tr_init */
  double bc1 = 1.0 - pow(b1, (double)step), bc2 = 1.0 - pow(b2, (double)step);
  c.decay = (float)(1.0 - lr * o->weight_decay);
  c.decays = o->weight_decay != 0;
  c.w1 = (float)(1.0 - b1);
  c.w1_comp = 1.0f - c.w1; /* lerp computes 1 - weight in float */
  c.lerp_small = c.w1 < 0.5f;
  c.beta2 = (float)b2;
  c.w2 = (float)(1.0 - b2);
  c.bc2_sqrt = (float)sqrt(bc2);
  c.eps = (float)(o->eps ? o->eps : 1e-8);
  c.neg_step = (float)-(lr / bc1);
  c.gscale = 1.0f;
  return c;
}

TRAIN_API tr_sgd_coef tr_sgd_coefs(const tr_optim *o, double lr, int first) {
  tr_sgd_coef c;
  c.wd = (float)o->weight_decay;
  c.momentum = (float)o->momentum;
  c.damp1 = (float)(1.0 - o->dampening);
  c.neg_lr = (float)-lr;
  c.gscale = 1.0f;
  c.decays = o->weight_decay != 0;
  c.has_momentum = o->momentum != 0;
  c.first = first != 0 && c.has_momentum;     /* both only matter with momentum */
  c.nesterov = o->nesterov != 0 && c.has_momentum;
  return c;
}

/* Blocks of TR__BLOCK, then the remainder: gcc -O2's "very cheap" cost model vectorises only loops with
   no scalar epilogue. Loops are copied per value of a flag, so their bodies have no branch. */
#define TR__BLOCK 16

/* x *= k */
static inline void tr__scale_run(float *TR__RESTRICT x, size_t n, float k) {
  size_t i;
  for (i = 0; i < n; i++) x[i] *= k;
}
static TR__CLONES void tr__scale_range(float *TR__RESTRICT x, size_t n, float k) {
  size_t i = 0;
  for (; i + TR__BLOCK <= n; i += TR__BLOCK) tr__scale_run(x + i, TR__BLOCK, k);
  tr__scale_run(x + i, n - i, k);
}

/* AdamW, one element after another (tr_adamw_elem): the lerp's other form, the remainders, and every
   machine without the SIMD kernels below. */
static inline void tr__adamw_run(float *TR__RESTRICT p, const float *TR__RESTRICT g, float *TR__RESTRICT m,
                                 float *TR__RESTRICT v, size_t n, tr_adamw_coef c) {
  size_t i;
  for (i = 0; i < n; i++) tr_adamw_elem(&p[i], g[i], &m[i], &v[i], c, c.lerp_small);
}

#if TR__X86
/* AdamW 4 and 8 at a time, tr_adamw_elem's operations in order, no FMA. Intrinsics because C's sqrtf
   sets errno and is not vectorised without -fno-math-errno. */
static void tr__adamw_sse(float *p, const float *g, float *m, float *v, size_t n, tr_adamw_coef c) {
  const __m128 decay = _mm_set1_ps(c.decay), w1 = _mm_set1_ps(c.w1), b2 = _mm_set1_ps(c.beta2),
               w2 = _mm_set1_ps(c.w2), bc2 = _mm_set1_ps(c.bc2_sqrt), eps = _mm_set1_ps(c.eps),
               step = _mm_set1_ps(c.neg_step);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m128 gi = _mm_loadu_ps(g + i), pi = _mm_loadu_ps(p + i), mi = _mm_loadu_ps(m + i), vi = _mm_loadu_ps(v + i), d;
    if (c.decays) pi = _mm_mul_ps(pi, decay);
    mi = _mm_add_ps(mi, _mm_mul_ps(w1, _mm_sub_ps(gi, mi)));
    vi = _mm_add_ps(_mm_mul_ps(vi, b2), _mm_mul_ps(_mm_mul_ps(w2, gi), gi));
    d = _mm_add_ps(_mm_div_ps(_mm_sqrt_ps(vi), bc2), eps);
    _mm_storeu_ps(p + i, _mm_add_ps(pi, _mm_div_ps(_mm_mul_ps(step, mi), d)));
    _mm_storeu_ps(m + i, mi);
    _mm_storeu_ps(v + i, vi);
  }
  tr__adamw_run(p + i, g + i, m + i, v + i, n - i, c);
}
__attribute__((target("avx"))) static void tr__adamw_avx(float *p, const float *g, float *m, float *v, size_t n, tr_adamw_coef c) {
  const __m256 decay = _mm256_set1_ps(c.decay), w1 = _mm256_set1_ps(c.w1), b2 = _mm256_set1_ps(c.beta2),
               w2 = _mm256_set1_ps(c.w2), bc2 = _mm256_set1_ps(c.bc2_sqrt), eps = _mm256_set1_ps(c.eps),
               step = _mm256_set1_ps(c.neg_step);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 gi = _mm256_loadu_ps(g + i), pi = _mm256_loadu_ps(p + i), mi = _mm256_loadu_ps(m + i), vi = _mm256_loadu_ps(v + i), d;
    if (c.decays) pi = _mm256_mul_ps(pi, decay);
    mi = _mm256_add_ps(mi, _mm256_mul_ps(w1, _mm256_sub_ps(gi, mi)));
    vi = _mm256_add_ps(_mm256_mul_ps(vi, b2), _mm256_mul_ps(_mm256_mul_ps(w2, gi), gi));
    d = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
    _mm256_storeu_ps(p + i, _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(step, mi), d)));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
  }
  tr__adamw_run(p + i, g + i, m + i, v + i, n - i, c);
}
#endif

/* AdamW over one chunk; a clip scale is applied to the chunk first, while it is in cache. */
static void tr__adamw_range(float *TR__RESTRICT p, float *TR__RESTRICT g, float *TR__RESTRICT m,
                            float *TR__RESTRICT v, size_t n, tr_adamw_coef c) {
  if (c.gscale != 1.0f) tr__scale_range(g, n, c.gscale);
  if (!c.lerp_small) { tr__adamw_run(p, g, m, v, n, c); return; } /* beta1 <= 0.5: rare, plain loop */
#if TR__X86
  if (tr__has_avx()) tr__adamw_avx(p, g, m, v, n, c);
  else tr__adamw_sse(p, g, m, v, n, c);
#else
  {
    size_t i = 0;
    c.lerp_small = 1;
    if (c.decays) { c.decays = 1; for (; i + TR__BLOCK <= n; i += TR__BLOCK) tr__adamw_run(p + i, g + i, m + i, v + i, TR__BLOCK, c); }
    else          { c.decays = 0; for (; i + TR__BLOCK <= n; i += TR__BLOCK) tr__adamw_run(p + i, g + i, m + i, v + i, TR__BLOCK, c); }
    tr__adamw_run(p + i, g + i, m + i, v + i, n - i, c);
  }
#endif
}

/* SGD, one element after another (tr_sgd_elem). */
static inline void tr__sgd_run(float *TR__RESTRICT p, const float *TR__RESTRICT g, float *TR__RESTRICT b, size_t n, tr_sgd_coef c) {
  size_t i;
  for (i = 0; i < n; i++) tr_sgd_elem(&p[i], g[i], c.has_momentum ? &b[i] : (float *)0, c);
}
/* SGD over one chunk: a copy of the loop per form, each with the flags as constants. */
static TR__CLONES void tr__sgd_range(float *TR__RESTRICT p, float *TR__RESTRICT g, float *TR__RESTRICT b, size_t n, tr_sgd_coef c) {
  size_t i = 0;
  if (c.gscale != 1.0f) tr__scale_range(g, n, c.gscale);
#define TR__SGD_FORM(dec, mom, fst, nes) \
  if (c.decays == dec && c.has_momentum == mom && c.first == fst && c.nesterov == nes) { \
    c.decays = dec; c.has_momentum = mom; c.first = fst; c.nesterov = nes; \
    for (; i + TR__BLOCK <= n; i += TR__BLOCK) tr__sgd_run(p + i, g + i, mom ? b + i : b, TR__BLOCK, c); \
  } else
  TR__SGD_FORM(0, 0, 0, 0) TR__SGD_FORM(1, 0, 0, 0)
  TR__SGD_FORM(0, 1, 0, 0) TR__SGD_FORM(1, 1, 0, 0) TR__SGD_FORM(0, 1, 0, 1) TR__SGD_FORM(1, 1, 0, 1)
  TR__SGD_FORM(0, 1, 1, 0) TR__SGD_FORM(1, 1, 1, 0) TR__SGD_FORM(0, 1, 1, 1) TR__SGD_FORM(1, 1, 1, 1)
  { (void)0; } /* (tr_sgd_coefs makes no other combination; one would still be right, plainly below) */
#undef TR__SGD_FORM
  tr__sgd_run(p + i, g + i, c.has_momentum ? b + i : b, n - i, c);
}

/* Exponent bits all ones, counted without a branch in 16 lanes added once at the end (adding them every
   block kept fewer loads in flight: 0.91 of a one-array read before, 1.01 after). */
static inline int tr__nonfinite_bits(const float *x) {
  uint32_t bits;
  memcpy(&bits, x, sizeof bits);
  return (bits & 0x7f800000u) == 0x7f800000u;
}
static TR__CLONES size_t tr__nonfinite_range(const float *TR__RESTRICT x, size_t n) {
  uint32_t bad[TR__BLOCK] = {0};
  size_t i = 0, j, total = 0;
  for (; i + TR__BLOCK <= n; i += TR__BLOCK) {
    TR__PREFETCH(x + i + TR__AHEAD); /* one read stream: ask ahead (hk_sumsq's note) */
    for (j = 0; j < TR__BLOCK; j++) bad[j] += (uint32_t)tr__nonfinite_bits(x + i + j);
  }
  for (; i < n; i++) total += (size_t)tr__nonfinite_bits(x + i);
  for (j = 0; j < TR__BLOCK; j++) total += bad[j];
  return total;
}

TRAIN_API void tr_adamw_update(float *p, float *g, float *m, float *v, size_t n, const tr_adamw_coef *c, int threads) {
  long k, nk = tr__n_chunks(n);
  TR__FOR_CHUNKS(threads)
  for (k = 0; k < nk; k++) {
    size_t o = (size_t)k * TR__CHUNK;
    tr__adamw_range(p + o, g + o, m + o, v + o, tr__chunk_len(n, (size_t)k), *c);
  }
}

TRAIN_API void tr_sgd_update(float *p, float *g, float *buf, size_t n, const tr_sgd_coef *c, int threads) {
  long k, nk = tr__n_chunks(n);
  TR__FOR_CHUNKS(threads)
  for (k = 0; k < nk; k++) {
    size_t o = (size_t)k * TR__CHUNK;
    tr__sgd_range(p + o, g + o, c->has_momentum ? buf + o : NULL, tr__chunk_len(n, (size_t)k), *c);
  }
}

/* zero_grad: a buffer far beyond the caches with streaming stores (a plain store or memset reads every
   line it overwrites: 2.0x faster than glibc 2.36's memset, docs/numbers.md), AVX's 32-byte ones where
   present; a small buffer with memset chunk by chunk, its zeros in cache for the backward. (Zero floats
   are zero bytes.) */
#define TR__STREAM_MIN ((size_t)1 << 23) /* floats (32 MiB) */
#if TR__X86
__attribute__((target("avx"))) static size_t tr__zero_stream_avx(float *x, size_t n) {
  size_t i = 0;
  const __m256 z = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) _mm256_stream_ps(x + i, z);
  return i;
}
#endif
static void tr__zero_stream(float *x, size_t n) {
#if TR__X86
  size_t i = 0;
  const __m128 z = _mm_setzero_ps();
  for (; i < n && ((uintptr_t)(x + i) & 31); i++) x[i] = 0; /* to a 32-byte boundary (floats are 4-aligned) */
  if (tr__has_avx()) i += tr__zero_stream_avx(x + i, n - i);
  for (; i + 4 <= n; i += 4) _mm_stream_ps(x + i, z);
  for (; i < n; i++) x[i] = 0;
  _mm_sfence(); /* the streamed lines are visible before any later store */
#else
  memset(x, 0, n * sizeof(float));
#endif
}
TRAIN_API void tr_zero(float *x, size_t n, int threads) {
  long k, nk = tr__n_chunks(n);
  if (n >= TR__STREAM_MIN) {
    nk = threads > 1 ? threads : 1;
    TR__FOR_CHUNKS(threads)
    for (k = 0; k < nk; k++) {
      size_t lo = n / (size_t)nk * (size_t)k, hi = k + 1 == nk ? n : n / (size_t)nk * (size_t)(k + 1);
      tr__zero_stream(x + lo, hi - lo);
    }
    return;
  }
  TR__FOR_CHUNKS(threads)
  for (k = 0; k < nk; k++) memset(x + (size_t)k * TR__CHUNK, 0, tr__chunk_len(n, (size_t)k) * sizeof(float));
}

TRAIN_API void tr_scale(float *x, size_t n, float s, int threads) {
  long k, nk = tr__n_chunks(n);
  TR__FOR_CHUNKS(threads)
  for (k = 0; k < nk; k++) tr__scale_range(x + (size_t)k * TR__CHUNK, tr__chunk_len(n, (size_t)k), s);
}

/* One chunk of tr_sumsq in hk_sumsq's order: on x86-64 with AVX and FMA, accumulator j % 16 is lane
   j % 4 of register j / 4. Fused and still hk_sumsq's bits (a float's square is exact in double); fewer
   instructions per byte keep more loads in flight: 0.87 -> 1.00 of a one-array read (docs/numbers.md). */
#if TR__X86 && !defined(TRAIN_NO_AVX)
static int tr__has_fma(void) { return __builtin_cpu_supports("avx") && __builtin_cpu_supports("fma"); }
__attribute__((target("avx,fma"))) static double tr__sumsq_fma(const float *TR__RESTRICT x, size_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  double acc[16];
  size_t i = 0, j, w;
  for (; i + 16 <= n; i += 16) {
    __m256d v0 = _mm256_cvtps_pd(_mm_loadu_ps(x + i)), v1 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)),
            v2 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 8)), v3 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 12));
    TR__PREFETCH(x + i + TR__AHEAD); /* (past the end near it: a prefetch never faults) */
    a0 = _mm256_fmadd_pd(v0, v0, a0);
    a1 = _mm256_fmadd_pd(v1, v1, a1);
    a2 = _mm256_fmadd_pd(v2, v2, a2);
    a3 = _mm256_fmadd_pd(v3, v3, a3);
  }
  _mm256_storeu_pd(acc, a0); _mm256_storeu_pd(acc + 4, a1); _mm256_storeu_pd(acc + 8, a2); _mm256_storeu_pd(acc + 12, a3);
  for (j = 0; i + j < n; j++) acc[j] += (double)x[i + j] * (double)x[i + j];
  for (w = 8; w >= 1; w /= 2)
    for (j = 0; j < w; j++) acc[j] += acc[j + w];
  return acc[0];
}
#endif
static double tr__sumsq_chunk(const float *x, size_t n) {
#if TR__X86 && !defined(TRAIN_NO_AVX)
  if (tr__has_fma()) return tr__sumsq_fma(x, n);
#endif
  return hk_sumsq(x, n);
}

/* The reductions: TR__GROUP chunks at a time, one partial each (any thread computes it), then the
   partials added in chunk order on this thread. */
TRAIN_API double tr_sumsq(const float *x, size_t n, int threads) {
  double part[TR__GROUP], sum = 0;
  long g, k, nk = tr__n_chunks(n);
  for (g = 0; g < nk; g += TR__GROUP) {
    long ng = nk - g < TR__GROUP ? nk - g : TR__GROUP;
    TR__FOR_CHUNKS(threads)
    for (k = 0; k < ng; k++) part[k] = tr__sumsq_chunk(x + (size_t)(g + k) * TR__CHUNK, tr__chunk_len(n, (size_t)(g + k)));
    for (k = 0; k < ng; k++) sum += part[k];
  }
  return sum;
}

/* One chunk: sum of squares in hk_sumsq's order and the clamp, in one pass (a NaN stays). */
static TR__CLONES double tr__clamp_sumsq_chunk(float *TR__RESTRICT x, size_t n, float lo, float hi) {
  double acc[16] = {0};
  size_t i = 0, j, w;
  for (; i + 16 <= n; i += 16) {
    TR__PREFETCH(x + i + TR__AHEAD); /* (past the end near it: a prefetch never faults) */
    for (j = 0; j < 16; j++) {
      float v = x[i + j];
      acc[j] += (double)v * (double)v;
      x[i + j] = v > hi ? hi : (v < lo ? lo : v);
    }
  }
  for (j = 0; i + j < n; j++) {
    float v = x[i + j];
    acc[j] += (double)v * (double)v;
    x[i + j] = v > hi ? hi : (v < lo ? lo : v);
  }
  for (w = 8; w >= 1; w /= 2)
    for (j = 0; j < w; j++) acc[j] += acc[j + w];
  return acc[0];
}

TRAIN_API double tr_clamp_sumsq(float *x, size_t n, float lo, float hi, int threads) {
  double part[TR__GROUP], sum = 0;
  long g, k, nk = tr__n_chunks(n);
  for (g = 0; g < nk; g += TR__GROUP) {
    long ng = nk - g < TR__GROUP ? nk - g : TR__GROUP;
    TR__FOR_CHUNKS(threads)
    for (k = 0; k < ng; k++) part[k] = tr__clamp_sumsq_chunk(x + (size_t)(g + k) * TR__CHUNK, tr__chunk_len(n, (size_t)(g + k)), lo, hi);
    for (k = 0; k < ng; k++) sum += part[k];
  }
  return sum;
}

/* One chunk of tr_scale_sumsq: tr__scale_run's products, summed in hk_sumsq's order. */
static TR__CLONES double tr__scale_sumsq_chunk(float *TR__RESTRICT x, size_t n, float s) {
  double acc[16] = {0};
  size_t i = 0, j, w;
  for (; i + 16 <= n; i += 16) {
    TR__PREFETCH(x + i + TR__AHEAD);
    for (j = 0; j < 16; j++) {
      float v = x[i + j] * s;
      x[i + j] = v;
      acc[j] += (double)v * (double)v;
    }
  }
  for (j = 0; i + j < n; j++) {
    float v = x[i + j] * s;
    x[i + j] = v;
    acc[j] += (double)v * (double)v;
  }
  for (w = 8; w >= 1; w /= 2)
    for (j = 0; j < w; j++) acc[j] += acc[j + w];
  return acc[0];
}

TRAIN_API double tr_scale_sumsq(float *x, size_t n, float s, int threads) {
  double part[TR__GROUP], sum = 0;
  long g, k, nk = tr__n_chunks(n);
  for (g = 0; g < nk; g += TR__GROUP) {
    long ng = nk - g < TR__GROUP ? nk - g : TR__GROUP;
    TR__FOR_CHUNKS(threads)
    for (k = 0; k < ng; k++) part[k] = tr__scale_sumsq_chunk(x + (size_t)(g + k) * TR__CHUNK, tr__chunk_len(n, (size_t)(g + k)), s);
    for (k = 0; k < ng; k++) sum += part[k];
  }
  return sum;
}

TRAIN_API size_t tr_count_nonfinite(const float *x, size_t n, int threads) {
  size_t part[TR__GROUP], bad = 0;
  long g, k, nk = tr__n_chunks(n);
  for (g = 0; g < nk; g += TR__GROUP) {
    long ng = nk - g < TR__GROUP ? nk - g : TR__GROUP;
    TR__FOR_CHUNKS(threads)
    for (k = 0; k < ng; k++) part[k] = tr__nonfinite_range(x + (size_t)(g + k) * TR__CHUNK, tr__chunk_len(n, (size_t)(g + k)));
    for (k = 0; k < ng; k++) bad += part[k];
  }
  return bad;
}
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
