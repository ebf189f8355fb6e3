/* kernels/train_cuda.cuh - train.h's per-step math as CUDA kernels - MIT or public domain

   What train.h does to the parameters after every backward pass, on the GPU: zero_grad, scaling (the
   accumulation window's mean), the global gradient norm (deterministic), clipping by norm (folded into
   the update) and by value, AdamW and SGD updates (PyTorch's formulas, float32, no FMA contraction),
   a NaN/Inf scan, a histogram, the mean of per-sample losses, and the weight average (EMA/SWA) with
   its swap, for train.h's ema callback on a device model.

   USAGE
     Declarations (C99 and C++, no CUDA header needed): #include "kernels/train_cuda.cuh" anywhere
     (it includes ../train.h for the optimizers' formulas).
     Implementation: in exactly one translation unit compiled by nvcc with -fmad=false,
         #define TRAIN_CUDA_IMPLEMENTATION
         #include "kernels/train_cuda.cuh"
     train.h does this itself when TRAIN_CUDA and TRAIN_IMPLEMENTATION are defined (then that file is a
     .cu file built by nvcc; the user's other files stay C). Link with -lcudart -lstdc++.

   THE CONTRACT
     - Pointers named d_* are device memory. `stream` is a cudaStream_t passed as void* (NULL = the
       default stream), so no CUDA type appears in a C file.
     - Every launcher returns 0 or a CUDA error code (trc_error_string names it). Launchers only
       enqueue work: none of them waits for the GPU. The only calls that wait are trc_copy_to_host and
       trc_synchronize; each bumps trc_sync_count(), so a test can prove a step never waits.
     - Scratch is the caller's, allocated once: TRC_NORM_BLOCKS doubles of partial sums and one
       trc_ctrl, the device-side control block that carries the norm, the clip scale, the non-finite
       flags and the skip decision from kernel to kernel without a round trip to the host.
     - Same formulas as the CPU: see "per-element math" below (build with -fmad=false).
     - Determinism: the norm runs on a fixed grid of TRC_NORM_BLOCKS blocks, accumulates in double,
       reduces in shared memory in a fixed tree order, and one final block adds the partials in a
       fixed order: the same bits run after run, on every GPU (the grid does not depend on the GPU
       model). The loss mean is one block, same scheme. Histogram and NaN counts use integer atomics
       only (exact).
     - CUDA graphs: every launcher is capturable (no allocation, no sync, no host reads). AdamW's step
       count reaches the kernel as host scalars (tr_adamw_coef): a captured update keeps the
       captured step's bias correction, so re-capture (or update the node's arguments) per step.

   CHANGELOG: CHANGES.md in the hooks.h repository (every version of hooks.h, train.h and the kernels).
*/
#ifndef TRAIN_CUDA_CUH
#define TRAIN_CUDA_CUH

#include <stddef.h>
#include <math.h>
#ifndef TRAIN_MATH_H /* in a program of train/'s parts, train/math.h (included already) has them */
#include "../train.h" /* tr_adamw_coef, tr_sgd_coef, tr_adamw_elem, tr_sgd_elem */
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define TRC_NORM_BLOCKS 1024 /* the fixed grid of every sum (partials: this many doubles) */
#define TRC_THREADS     256  /* threads per block of the elementwise and partial-sum kernels */

/* The device-side control block: written by the norm / loss kernels, read by the updates. */
typedef struct trc_ctrl {
  double sumsq;         /* sum of squares of the last trc_norm / trc_clip_value input */
  double norm;          /* sqrt(sumsq) */
  float clip_scale;     /* what the update multiplies gradients by: 1, or max_norm/(norm+1e-6) when < 1 */
  int nonfinite;        /* the last norm's sum is NaN or infinite */
  int skip;             /* the updates leave everything untouched (set by trc_norm with skip_nonfinite) */
} trc_ctrl;

/* ---- per-element math, shared by the CPU and the GPU -------------------------------------------
   The optimizers' formulas are train.h's (tr_adamw_elem, tr_sgd_elem and their tr_adamw_coef /
   tr_sgd_coef scalars, TR__HD = __host__ __device__ under nvcc): one definition, run by the CPU loops
   and by the kernels below. To get the CPU's bits on the GPU, the file that compiles the kernels must
   keep nvcc from fusing a*b+c into FMAs: build it with -fmad=false (make test-cuda-build checks the
   PTX of the update kernels for fma instructions). The little helpers below are TRC_HD too. */
#if defined(__CUDACC__)
#  define TRC_HD static __host__ __device__ __forceinline__
#else
#  define TRC_HD static inline
#endif

/* PyTorch's clip_grad_norm_ coefficient, in double, applied as a float: 1 when no clipping. */
TRC_HD float trc_clip_scale(double norm, double max_norm) {
  double coef = max_norm / (norm + 1e-6);
  return (max_norm > 0 && coef < 1.0) ? (float)coef : 1.0f;
}

TRC_HD float trc_clamp(float x, float lo, float hi) { return x > hi ? hi : (x < lo ? lo : x); }

/* ---- launchers (enqueue only; 0 or a CUDA error code) ------------------------------------------- */
int trc_zero(float *d_x, size_t n, void *stream);
int trc_scale(float *d_x, size_t n, float k, void *stream);               /* x *= k */
int trc_apply_clip(float *d_g, size_t n, const trc_ctrl *d_ctrl, void *stream); /* g *= clip_scale when != 1 */
/* Sum of squares into d_ctrl (sumsq, norm, nonfinite) and the clip scale for max_norm (<= 0: none);
   skip_nonfinite: a non-finite norm sets d_ctrl->skip (else skip is cleared). */
int trc_norm(const float *d_x, size_t n, double *d_partials, trc_ctrl *d_ctrl, double max_norm, int skip_nonfinite,
             void *stream);
/* Clamp to [-limit, limit] in place; d_ctrl gets the norm of the values before clamping. */
int trc_clip_value(float *d_g, size_t n, float limit, double *d_partials, trc_ctrl *d_ctrl, void *stream);
/* The updates: train.h's tr_adamw_update / tr_sgd_update on the device (c from tr_adamw_coefs /
   tr_sgd_coefs; d_buf unused when c.momentum is 0). With d_ctrl NULL the gradient is scaled by
   c.gscale (written back unless 1), as on the CPU. With d_ctrl, the device's clip_scale replaces
   c.gscale, and nothing is touched when d_ctrl->skip. */
int trc_adamw(float *d_p, float *d_g, float *d_m, float *d_v, size_t n, tr_adamw_coef c, const trc_ctrl *d_ctrl,
              void *stream);
int trc_sgd(float *d_p, float *d_g, float *d_buf, size_t n, tr_sgd_coef c, const trc_ctrl *d_ctrl, void *stream);
/* Adds the number of NaN/Inf values to *d_count (zero it first with trc_memset). */
int trc_count_nonfinite(const float *d_x, size_t n, unsigned long long *d_count, void *stream);
/* bins equal-width bins over [lo, hi) in d_counts[0..bins-1], then d_counts[bins] = below lo,
   [bins+1] = at or above hi, [bins+2] = NaN/Inf (train.h's tr_hist_bin). Zeroes d_counts first
   (bins+3 entries). */
int trc_histogram(const float *d_x, size_t n, float lo, float hi, int bins, unsigned long long *d_counts, void *stream);
/* *d_mean = the mean of n per-sample losses, summed in double in a fixed order by one block (a loss
   vector is small next to the parameters), rounded to float once. */
int trc_loss_mean(const float *d_losses, size_t n, float *d_mean, void *stream);

/* The weight average's update, train.h's ema callback's: avg = (float)(avg + w*(p - avg)) per element,
   in double as on the CPU (w = 1 - decay for the EMA, 1/(n+1) for SWA, 1 for the first: a copy). */
int trc_ema(float *d_avg, const float *d_p, size_t n, double w, void *stream);
int trc_swap(float *d_a, float *d_b, size_t n, void *stream); /* exchange a and b */

/* ---- memory and devices (thin wrappers, so C files need no CUDA header) --------------------------- */
int  trc_malloc(void **d_p, size_t bytes);          /* cudaMalloc */
void trc_free(void *d_p);                           /* NULL is fine */
int  trc_memset(void *d_p, int byte, size_t bytes, void *stream);
int  trc_copy_to_device(void *d_dst, const void *src, size_t bytes, void *stream); /* queued after earlier work */
int  trc_copy_on_device(void *d_dst, const void *d_src, size_t bytes, void *stream);
int  trc_copy_to_host(void *dst, const void *d_src, size_t bytes, void *stream);  /* waits (counted) */
int  trc_synchronize(void *stream);                                             /* waits (counted) */
unsigned long long trc_sync_count(void);            /* waiting calls made through this file so far */
const char *trc_error_string(int err);
/* 1 when a CUDA device can be used; else 0 and why (the runtime's message) in why[0..n-1]. */
int trc_device_ok(char *why, size_t n);
/* The current device's PCI bus id ("0000:3b:00.0"), how NVML names the same GPU (train.h's device_stats):
   0, or a CUDA error code. */
int trc_pci_bus_id(char *buf, int n);

#ifdef __cplusplus
}
#endif
#endif /* TRAIN_CUDA_CUH */

/* =================================================================================================
   IMPLEMENTATION
   ================================================================================================= */
#ifdef TRAIN_CUDA_IMPLEMENTATION
#ifndef TRAIN_CUDA_IMPLEMENTED
#define TRAIN_CUDA_IMPLEMENTED
#ifndef __CUDACC__
#error "TRAIN_CUDA_IMPLEMENTATION must be compiled by nvcc (a .cu file); other files include only the declarations"
#endif
#include <cuda_runtime.h>
#include <stdio.h>

static unsigned long long trc__syncs; /* waiting calls so far (host side, one process) */

static cudaStream_t trc__s(void *stream) { return (cudaStream_t)stream; }
/* Elementwise kernels: a thread takes TRC_PER_THREAD elements a block's width apart (coalesced) and
   issues all its loads before any store. At one element a thread too few bytes are in flight to keep
   HBM busy (on an H200, plain SGD ran at 0.60 of a copy's bandwidth that way). */
#define TRC_PER_THREAD 4
static unsigned trc__blocks(size_t n) {
  size_t per_block = (size_t)TRC_THREADS * TRC_PER_THREAD;
  return (unsigned)((n + per_block - 1) / per_block);
}
/* the k-th element of this thread, k < TRC_PER_THREAD */
__device__ __forceinline__ size_t trc__at(int k) {
  return ((size_t)blockIdx.x * TRC_PER_THREAD + (size_t)k) * blockDim.x + threadIdx.x;
}
/* a launch reports its configuration error at once; execution errors surface at the next wait */
static int trc__launched(void) { return (int)cudaGetLastError(); }

__global__ void trc__scale_kernel(float *__restrict__ x, size_t n, float k) {
  float v[TRC_PER_THREAD];
  int e;
#pragma unroll
  for (e = 0; e < TRC_PER_THREAD; e++) if (trc__at(e) < n) v[e] = x[trc__at(e)];
#pragma unroll
  for (e = 0; e < TRC_PER_THREAD; e++) if (trc__at(e) < n) x[trc__at(e)] = __fmul_rn(v[e], k);
}

__global__ void trc__apply_clip_kernel(float *__restrict__ g, size_t n, const trc_ctrl *ctrl) {
  float k = ctrl->clip_scale, v[TRC_PER_THREAD];
  int e;
  if (k == 1.0f || ctrl->skip) return;
#pragma unroll
  for (e = 0; e < TRC_PER_THREAD; e++) if (trc__at(e) < n) v[e] = g[trc__at(e)];
#pragma unroll
  for (e = 0; e < TRC_PER_THREAD; e++) if (trc__at(e) < n) g[trc__at(e)] = __fmul_rn(v[e], k);
}

/* Sum a block's per-thread doubles in a fixed tree order; thread 0 gets the total. */
__device__ double trc__block_sum(double x) {
  __shared__ double s[1024];
  unsigned t = threadIdx.x, w;
  s[t] = x;
  __syncthreads();
  for (w = blockDim.x / 2; w > 0; w /= 2) { /* blockDim is a power of two */
    if (t < w) s[t] += s[t + w];
    __syncthreads();
  }
  return s[0];
}

/* Partial sums of squares: thread t of block b takes elements i = b*T+t, i+S, i+2S, ... (T threads,
   S = grid size in threads), added in that order, so the order depends only on n. Four loads are
   issued before their adds, to keep enough bytes in flight. Optionally clamps as it goes (clip by
   value; the squares are of the values before clamping). */
__device__ __forceinline__ double trc__sq(float *x, size_t i, int clamp, float lo, float hi, double acc) {
  float v = x[i];
  if (clamp) x[i] = trc_clamp(v, lo, hi);
  return __dadd_rn(acc, __dmul_rn((double)v, (double)v));
}

__global__ void trc__sumsq_kernel(float *x, size_t n, double *partials, int clamp, float lo, float hi) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, s = (size_t)gridDim.x * blockDim.x;
  double acc = 0;
  for (; i + 3 * s < n; i += 4 * s) {
    float a = x[i], b = x[i + s], c = x[i + 2 * s], d = x[i + 3 * s];
    acc = __dadd_rn(acc, __dmul_rn((double)a, (double)a));
    acc = __dadd_rn(acc, __dmul_rn((double)b, (double)b));
    acc = __dadd_rn(acc, __dmul_rn((double)c, (double)c));
    acc = __dadd_rn(acc, __dmul_rn((double)d, (double)d));
    if (clamp) {
      x[i] = trc_clamp(a, lo, hi); x[i + s] = trc_clamp(b, lo, hi);
      x[i + 2 * s] = trc_clamp(c, lo, hi); x[i + 3 * s] = trc_clamp(d, lo, hi);
    }
  }
  for (; i < n; i += s) acc = trc__sq(x, i, clamp, lo, hi, acc);
  acc = trc__block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

/* One block adds the TRC_NORM_BLOCKS partials (fixed order) and fills the control block. */
__global__ void trc__norm_finish_kernel(const double *partials, trc_ctrl *ctrl, double max_norm, int skip_nonfinite) {
  double s = trc__block_sum(partials[threadIdx.x]);
  if (threadIdx.x == 0) {
    int bad = !isfinite(s);
    ctrl->sumsq = s;
    ctrl->norm = sqrt(s);
    ctrl->nonfinite = bad;
    ctrl->clip_scale = trc_clip_scale(ctrl->norm, max_norm);
    ctrl->skip = skip_nonfinite && bad;
  }
}

__global__ void trc__loss_mean_kernel(const float *x, size_t n, float *mean) {
  size_t i;
  double acc = 0;
  for (i = threadIdx.x; i < n; i += blockDim.x) acc += (double)x[i];
  acc = trc__block_sum(acc);
  if (threadIdx.x == 0) *mean = (float)(acc / (double)n);
}

__global__ void trc__adamw_kernel(float *__restrict__ p, float *__restrict__ g, float *__restrict__ m,
                                  float *__restrict__ v, size_t n, tr_adamw_coef c, const trc_ctrl *ctrl) {
  float k = ctrl ? ctrl->clip_scale : c.gscale, gi[TRC_PER_THREAD], pi[TRC_PER_THREAD], mi[TRC_PER_THREAD],
        vi[TRC_PER_THREAD];
  int e;
  if (ctrl && ctrl->skip) return;
#pragma unroll
  for (e = 0; e < TRC_PER_THREAD; e++) {
    size_t i = trc__at(e);
    if (i < n) { gi[e] = g[i]; pi[e] = p[i]; mi[e] = m[i]; vi[e] = v[i]; }
  }
#pragma unroll
  for (e = 0; e < TRC_PER_THREAD; e++) {
    size_t i = trc__at(e);
    if (i >= n) continue;
    if (k != 1.0f) g[i] = gi[e] = __fmul_rn(gi[e], k); /* the clipped gradient stays in the buffer, as on the CPU */
    tr_adamw_elem(&pi[e], gi[e], &mi[e], &vi[e], c, c.lerp_small);
    p[i] = pi[e]; m[i] = mi[e]; v[i] = vi[e];
  }
}

__global__ void trc__sgd_kernel(float *__restrict__ p, float *__restrict__ g, float *__restrict__ buf, size_t n,
                                tr_sgd_coef c, const trc_ctrl *ctrl) {
  float k = ctrl ? ctrl->clip_scale : c.gscale, gi[TRC_PER_THREAD], pi[TRC_PER_THREAD], bi[TRC_PER_THREAD];
  int e, momentum = c.momentum != 0.0f;
  if (ctrl && ctrl->skip) return;
#pragma unroll
  for (e = 0; e < TRC_PER_THREAD; e++) {
    size_t i = trc__at(e);
    bi[e] = 0;
    if (i < n) { gi[e] = g[i]; pi[e] = p[i]; if (momentum) bi[e] = buf[i]; }
  }
#pragma unroll
  for (e = 0; e < TRC_PER_THREAD; e++) {
    size_t i = trc__at(e);
    if (i >= n) continue;
    if (k != 1.0f) g[i] = gi[e] = __fmul_rn(gi[e], k);
    tr_sgd_elem(&pi[e], gi[e], &bi[e], c);
    p[i] = pi[e];
    if (momentum) buf[i] = bi[e];
  }
}

__global__ void trc__ema_kernel(float *__restrict__ avg, const float *__restrict__ p, size_t n, double w) {
  float a[TRC_PER_THREAD], x[TRC_PER_THREAD];
  int e;
#pragma unroll
  for (e = 0; e < TRC_PER_THREAD; e++) if (trc__at(e) < n) { a[e] = avg[trc__at(e)]; x[e] = p[trc__at(e)]; }
#pragma unroll
  for (e = 0; e < TRC_PER_THREAD; e++)
    if (trc__at(e) < n)
      avg[trc__at(e)] = (float)__dadd_rn((double)a[e], __dmul_rn(w, __dsub_rn((double)x[e], (double)a[e])));
}

__global__ void trc__swap_kernel(float *__restrict__ a, float *__restrict__ b, size_t n) {
  float x[TRC_PER_THREAD], y[TRC_PER_THREAD];
  int e;
#pragma unroll
  for (e = 0; e < TRC_PER_THREAD; e++) if (trc__at(e) < n) { x[e] = a[trc__at(e)]; y[e] = b[trc__at(e)]; }
#pragma unroll
  for (e = 0; e < TRC_PER_THREAD; e++) if (trc__at(e) < n) { a[trc__at(e)] = y[e]; b[trc__at(e)] = x[e]; }
}

__device__ int trc__is_nonfinite(float x) { return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u; }

__global__ void trc__nonfinite_kernel(const float *x, size_t n, unsigned long long *count) {
  __shared__ unsigned block_count;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
  unsigned c = 0;
  if (threadIdx.x == 0) block_count = 0;
  __syncthreads();
  for (; i + 3 * stride < n; i += 4 * stride) { /* four loads in flight, as in the sums */
    float a = x[i], b = x[i + stride], d = x[i + 2 * stride], e = x[i + 3 * stride];
    c += trc__is_nonfinite(a) + trc__is_nonfinite(b) + trc__is_nonfinite(d) + trc__is_nonfinite(e);
  }
  for (; i < n; i += stride) c += trc__is_nonfinite(x[i]);
  if (c) atomicAdd(&block_count, c);
  __syncthreads();
  if (threadIdx.x == 0 && block_count) atomicAdd(count, (unsigned long long)block_count);
}

/* Shared-memory bins per block, one copy per warp (up to `copies`: random data sends a warp's 32 atomics to a
   few bins, and 8 warps on one copy queue behind each other), four loads in flight as in the sums, then the
   copies summed and one 64-bit atomic per non-empty bin: integer sums, exact. */
__global__ void trc__histogram_kernel(const float *x, size_t n, float lo, float hi, int bins, int copies,
                                      unsigned long long *counts) {
  extern __shared__ unsigned h[];
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
  int b, c, nb = bins + 3;
  unsigned *mine = h + (threadIdx.x / 32 % copies) * nb;
  float width = (hi - lo) / (float)bins;
  for (b = threadIdx.x; b < nb * copies; b += blockDim.x) h[b] = 0;
  __syncthreads();
  for (; i + 3 * stride < n; i += 4 * stride) {
    float v0 = x[i], v1 = x[i + stride], v2 = x[i + 2 * stride], v3 = x[i + 3 * stride];
    atomicAdd(&mine[tr_hist_bin(v0, lo, hi, width, bins)], 1u);
    atomicAdd(&mine[tr_hist_bin(v1, lo, hi, width, bins)], 1u);
    atomicAdd(&mine[tr_hist_bin(v2, lo, hi, width, bins)], 1u);
    atomicAdd(&mine[tr_hist_bin(v3, lo, hi, width, bins)], 1u);
  }
  for (; i < n; i += stride) atomicAdd(&mine[tr_hist_bin(x[i], lo, hi, width, bins)], 1u);
  __syncthreads();
  for (b = threadIdx.x; b < nb; b += blockDim.x) {
    unsigned long long sum = 0;
    for (c = 0; c < copies; c++) sum += h[c * nb + b];
    if (sum) atomicAdd(&counts[b], sum);
  }
}

extern "C" {

int trc_zero(float *d_x, size_t n, void *stream) { return (int)cudaMemsetAsync(d_x, 0, n * sizeof(float), trc__s(stream)); }

int trc_scale(float *d_x, size_t n, float k, void *stream) {
  if (n == 0) return 0;
  trc__scale_kernel<<<trc__blocks(n), TRC_THREADS, 0, trc__s(stream)>>>(d_x, n, k);
  return trc__launched();
}

int trc_apply_clip(float *d_g, size_t n, const trc_ctrl *d_ctrl, void *stream) {
  if (n == 0) return 0;
  trc__apply_clip_kernel<<<trc__blocks(n), TRC_THREADS, 0, trc__s(stream)>>>(d_g, n, d_ctrl);
  return trc__launched();
}

int trc_norm(const float *d_x, size_t n, double *d_partials, trc_ctrl *d_ctrl, double max_norm, int skip_nonfinite,
             void *stream) {
  trc__sumsq_kernel<<<TRC_NORM_BLOCKS, TRC_THREADS, 0, trc__s(stream)>>>((float *)d_x, n, d_partials, 0, 0.0f, 0.0f);
  trc__norm_finish_kernel<<<1, TRC_NORM_BLOCKS, 0, trc__s(stream)>>>(d_partials, d_ctrl, max_norm, skip_nonfinite);
  return trc__launched();
}

int trc_clip_value(float *d_g, size_t n, float limit, double *d_partials, trc_ctrl *d_ctrl, void *stream) {
  trc__sumsq_kernel<<<TRC_NORM_BLOCKS, TRC_THREADS, 0, trc__s(stream)>>>(d_g, n, d_partials, 1, -limit, limit);
  trc__norm_finish_kernel<<<1, TRC_NORM_BLOCKS, 0, trc__s(stream)>>>(d_partials, d_ctrl, 0.0, 0);
  return trc__launched();
}

int trc_adamw(float *d_p, float *d_g, float *d_m, float *d_v, size_t n, tr_adamw_coef c, const trc_ctrl *d_ctrl,
              void *stream) {
  if (n == 0) return 0;
  trc__adamw_kernel<<<trc__blocks(n), TRC_THREADS, 0, trc__s(stream)>>>(d_p, d_g, d_m, d_v, n, c, d_ctrl);
  return trc__launched();
}

int trc_sgd(float *d_p, float *d_g, float *d_buf, size_t n, tr_sgd_coef c, const trc_ctrl *d_ctrl, void *stream) {
  if (n == 0) return 0;
  trc__sgd_kernel<<<trc__blocks(n), TRC_THREADS, 0, trc__s(stream)>>>(d_p, d_g, d_buf, n, c, d_ctrl);
  return trc__launched();
}

int trc_ema(float *d_avg, const float *d_p, size_t n, double w, void *stream) {
  if (n == 0) return 0;
  trc__ema_kernel<<<trc__blocks(n), TRC_THREADS, 0, trc__s(stream)>>>(d_avg, d_p, n, w);
  return trc__launched();
}

int trc_swap(float *d_a, float *d_b, size_t n, void *stream) {
  if (n == 0) return 0;
  trc__swap_kernel<<<trc__blocks(n), TRC_THREADS, 0, trc__s(stream)>>>(d_a, d_b, n);
  return trc__launched();
}

int trc_count_nonfinite(const float *d_x, size_t n, unsigned long long *d_count, void *stream) {
  trc__nonfinite_kernel<<<TRC_NORM_BLOCKS, TRC_THREADS, 0, trc__s(stream)>>>(d_x, n, d_count);
  return trc__launched();
}

int trc_histogram(const float *d_x, size_t n, float lo, float hi, int bins, unsigned long long *d_counts, void *stream) {
  int e, copies;
  if (bins < 1 || bins > 4096 || !(lo < hi)) return (int)cudaErrorInvalidValue;
  e = (int)cudaMemsetAsync(d_counts, 0, (size_t)(bins + 3) * sizeof *d_counts, trc__s(stream));
  if (e) return e;
  copies = 8192 / (bins + 3); /* 32 KB of shared memory at most: 8 copies of 64 bins, 1 of 4096 */
  if (copies > TRC_THREADS / 32) copies = TRC_THREADS / 32;
  trc__histogram_kernel<<<TRC_NORM_BLOCKS, TRC_THREADS, (size_t)copies * (bins + 3) * sizeof(unsigned),
                          trc__s(stream)>>>(d_x, n, lo, hi, bins, copies, d_counts);
  return trc__launched();
}

int trc_loss_mean(const float *d_losses, size_t n, float *d_mean, void *stream) {
  if (n == 0) return (int)cudaErrorInvalidValue;
  trc__loss_mean_kernel<<<1, TRC_NORM_BLOCKS, 0, trc__s(stream)>>>(d_losses, n, d_mean);
  return trc__launched();
}

int trc_malloc(void **d_p, size_t bytes) { return (int)cudaMalloc(d_p, bytes ? bytes : 1); }
void trc_free(void *d_p) { if (d_p) cudaFree(d_p); }
int trc_memset(void *d_p, int byte, size_t bytes, void *stream) { return (int)cudaMemsetAsync(d_p, byte, bytes, trc__s(stream)); }
int trc_copy_to_device(void *d_dst, const void *src, size_t bytes, void *stream) {
  return (int)cudaMemcpyAsync(d_dst, src, bytes, cudaMemcpyHostToDevice, trc__s(stream));
}
int trc_copy_on_device(void *d_dst, const void *d_src, size_t bytes, void *stream) {
  return (int)cudaMemcpyAsync(d_dst, d_src, bytes, cudaMemcpyDeviceToDevice, trc__s(stream));
}
int trc_copy_to_host(void *dst, const void *d_src, size_t bytes, void *stream) {
  int e = (int)cudaMemcpyAsync(dst, d_src, bytes, cudaMemcpyDeviceToHost, trc__s(stream));
  trc__syncs++;
  return e ? e : (int)cudaStreamSynchronize(trc__s(stream));
}
int trc_synchronize(void *stream) { trc__syncs++; return (int)cudaStreamSynchronize(trc__s(stream)); }
unsigned long long trc_sync_count(void) { return trc__syncs; }
const char *trc_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }

int trc_device_ok(char *why, size_t n) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count > 0) return 1;
  if (why && n) snprintf(why, n, "%s", e ? cudaGetErrorString(e) : "no CUDA device found");
  return 0;
}
int trc_pci_bus_id(char *buf, int n) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  return (int)(e ? e : cudaDeviceGetPCIBusId(buf, n, dev));
}

} /* extern "C" */
#endif /* TRAIN_CUDA_IMPLEMENTED */
#endif /* TRAIN_CUDA_IMPLEMENTATION */
