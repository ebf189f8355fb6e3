/* math_ref.c - the reference loops of make bench-math, in their own translation unit so that
   tests/math_ref_check.sh can check their object code: each must be vectorised (packed SIMD
   instructions in its loop), or the bench's ratios would flatter the passes.

   Shaped like train.h's passes, so that they are as fast as a loop can be with the default flags
   (-O2, nothing machine-specific): restrict pointers, chunks of HK_NORM_CHUNK elements handed to
   OpenMP threads, an inner block of 16 elements (a constant trip count, which gcc's -O2 cost model
   vectorises; it refuses loops that would need a scalar epilogue), and on x86-64 with gcc and glibc
   an AVX2 copy of each loop beside the default one, the loader picking one per machine (train.h's
   passes have the same). */
#include "math_ref.h"
#include "hooks.h" /* HK_NORM_CHUNK */

#if defined(__cplusplus)
#  define REF_RESTRICT __restrict
#else
#  define REF_RESTRICT restrict
#endif
/* noinline: each loop keeps its symbol, which the check looks for */
#if (defined(__GNUC__) && !defined(__clang__)) && defined(__x86_64__) && defined(__GLIBC__)
#  define REF_CLONES __attribute__((noinline, target_clones("avx2", "default")))
#elif defined(__GNUC__) || defined(__clang__)
#  define REF_CLONES __attribute__((noinline))
#else
#  define REF_CLONES
#endif
#define REF_PRAGMA(x) _Pragma(#x)
#ifdef _OPENMP
#  define REF_FOR_CHUNKS(threads) REF_PRAGMA(omp parallel for schedule(static) num_threads((threads) > 1 ? (threads) : 1) if((threads) > 1))
#else
#  define REF_FOR_CHUNKS(threads) (void)(threads);
#endif
#define REF_CHUNK ((size_t)HK_NORM_CHUNK)
#define REF_BLOCK 16

static size_t ref_len(size_t n, size_t k) { return n - k * REF_CHUNK < REF_CHUNK ? n - k * REF_CHUNK : REF_CHUNK; }
static long ref_chunks(size_t n) { return (long)((n + REF_CHUNK - 1) / REF_CHUNK); }

static REF_CLONES void ref_axpy_range(float *REF_RESTRICT a, const float *REF_RESTRICT b, size_t n, float s) {
  size_t i = 0, j;
  for (; i + REF_BLOCK <= n; i += REF_BLOCK)
    for (j = 0; j < REF_BLOCK; j++) a[i + j] += s * b[i + j];
  for (; i < n; i++) a[i] += s * b[i];
}
static REF_CLONES void ref_triad_range(float *REF_RESTRICT a, const float *REF_RESTRICT b, const float *REF_RESTRICT c,
                                       size_t n, float s) {
  size_t i = 0, j;
  for (; i + REF_BLOCK <= n; i += REF_BLOCK)
    for (j = 0; j < REF_BLOCK; j++) a[i + j] = b[i + j] + s * c[i + j];
  for (; i < n; i++) a[i] = b[i] + s * c[i];
}
static REF_CLONES void ref_copy_range(float *REF_RESTRICT a, const float *REF_RESTRICT b, size_t n) {
  size_t i = 0, j;
  for (; i + REF_BLOCK <= n; i += REF_BLOCK)
    for (j = 0; j < REF_BLOCK; j++) a[i + j] = b[i + j];
  for (; i < n; i++) a[i] = b[i];
}

/* 16 sums side by side: each stays in order, so no reassociation is needed to vectorise it. It asks
   for the data 4 KiB ahead, as the passes that read one array do: without that a single read stream
   runs slower, and the norm and the NaN scan would be judged against a slow read. */
#if defined(__GNUC__) || defined(__clang__)
#  define REF_PREFETCH(p) __builtin_prefetch(p)
#else
#  define REF_PREFETCH(p) ((void)0)
#endif
static REF_CLONES float ref_read_range(const float *REF_RESTRICT a, size_t n) {
  float acc[REF_BLOCK] = { 0 }, s = 0;
  size_t i = 0, j;
  for (; i + REF_BLOCK <= n; i += REF_BLOCK) {
    REF_PREFETCH(a + i + 1024);
    for (j = 0; j < REF_BLOCK; j++) acc[j] += a[i + j];
  }
  for (; i < n; i++) s += a[i];
  for (j = 0; j < REF_BLOCK; j++) s += acc[j];
  return s;
}

void ref_axpy(float *a, const float *b, size_t n, float s, int threads) {
  long k, nk = ref_chunks(n);
  REF_FOR_CHUNKS(threads)
  for (k = 0; k < nk; k++) ref_axpy_range(a + (size_t)k * REF_CHUNK, b + (size_t)k * REF_CHUNK, ref_len(n, (size_t)k), s);
}
void ref_triad(float *a, const float *b, const float *c, size_t n, float s, int threads) {
  long k, nk = ref_chunks(n);
  REF_FOR_CHUNKS(threads)
  for (k = 0; k < nk; k++)
    ref_triad_range(a + (size_t)k * REF_CHUNK, b + (size_t)k * REF_CHUNK, c + (size_t)k * REF_CHUNK, ref_len(n, (size_t)k), s);
}
void ref_copy(float *a, const float *b, size_t n, int threads) {
  long k, nk = ref_chunks(n);
  REF_FOR_CHUNKS(threads)
  for (k = 0; k < nk; k++) ref_copy_range(a + (size_t)k * REF_CHUNK, b + (size_t)k * REF_CHUNK, ref_len(n, (size_t)k));
}
double ref_read(const float *a, size_t n, int threads) {
  long k, nk = ref_chunks(n);
  double s = 0;
#ifdef _OPENMP
#  pragma omp parallel for schedule(static) num_threads(threads > 1 ? threads : 1) if(threads > 1) reduction(+:s)
#endif
  for (k = 0; k < nk; k++) s += ref_read_range(a + (size_t)k * REF_CHUNK, ref_len(n, (size_t)k));
  (void)threads;
  return s;
}
