/* examples/cuda_mlp.cu - the spirals MLP's forward and backward as CUDA kernels (see cuda_mlp.h).

   The program's one CUDA translation unit: hooks.h and train.h are implemented here with TRAIN_CUDA,
   which also compiles kernels/train_cuda.cuh (the optimizer, norm and clipping kernels train.h runs).

   Each kernel computes what examples/mlp.h computes, in the same order, with round-to-nearest
   intrinsics (no FMA contraction): one thread per output, looping over the batch where the CPU code
   accumulates, so every sum has the CPU's order and no atomics are needed (deterministic). Only expf
   and logf differ from glibc's by an ulp at times, so the GPU run tracks the CPU run closely but not
   bit for bit. */
#define TRAIN_CUDA
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#define CUDA_MLP_IMPLEMENTATION /* the device buffers and the dataset (cuda_mlp.h) */
#include "examples/cuda_mlp.h"

#define ADD __fadd_rn
#define MUL __fmul_rn

/* pre = x W1^T + b1, h = relu(pre): block b = row, thread j = hidden unit */
__global__ static void layer1(const float *x, const int *order, int start, int in, const float *w1, const float *b1,
                              float *pre, float *h) {
  int b = blockIdx.x, j = threadIdx.x, H = blockDim.x;
  const float *xb = x + (size_t)order[start + b] * in, *wj = w1 + (size_t)j * in;
  float s = b1[j];
  for (int i = 0; i < in; i++) s = ADD(s, MUL(wj[i], xb[i]));
  pre[b * H + j] = s;
  h[b * H + j] = s > 0.0f ? s : 0.0f;
}

/* probs = softmax(h W2^T + b2), losses[b] = -log p[y]: thread b = row */
__global__ static void layer2(const float *h, const int *y, const int *order, int start, int B, int H, int K,
                              const float *w2, const float *b2, float *probs, float *losses) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  const float *hb = h + (size_t)b * H;
  float *p = probs + (size_t)b * K, maxv = -INFINITY, sum = 0.0f;
  for (int k = 0; k < K; k++) {
    float s = b2[k];
    for (int j = 0; j < H; j++) s = ADD(s, MUL(w2[k * H + j], hb[j]));
    p[k] = s;
    if (s > maxv) maxv = s;
  }
  for (int k = 0; k < K; k++) { p[k] = expf(p[k] - maxv); sum = ADD(sum, p[k]); }
  for (int k = 0; k < K; k++) p[k] = __fdiv_rn(p[k], sum);
  float py = p[y[order[start + b]]];
  losses[b] = -logf(py > 1e-30f ? py : 1e-30f);
}

__device__ static float dlogit(const float *probs, const int *y, const int *order, int start, int K, int b, int k,
                               float scale) {
  return MUL(probs[b * K + k] - (k == y[order[start + b]] ? 1.0f : 0.0f), scale);
}

/* dW2 += dlogit h, db2 += dlogit: block k = class, thread j = hidden unit, rows in order */
__global__ static void back2(const float *probs, const int *y, const int *order, int start, int B, int K,
                             const float *h, float scale, float *dw2, float *db2) {
  int k = blockIdx.x, j = threadIdx.x, H = blockDim.x;
  for (int b = 0; b < B; b++) {
    float d = dlogit(probs, y, order, start, K, b, k, scale);
    dw2[k * H + j] = ADD(dw2[k * H + j], MUL(d, h[b * H + j]));
    if (j == 0) db2[k] = ADD(db2[k], d);
  }
}

/* dh = dlogits W2, then through the relu: block b = row, thread j = hidden unit */
__global__ static void back_h(const float *probs, const int *y, const int *order, int start, int K, const float *w2,
                              const float *pre, float scale, float *dh) {
  int b = blockIdx.x, j = threadIdx.x, H = blockDim.x;
  float s = 0.0f;
  for (int k = 0; k < K; k++) s = ADD(s, MUL(dlogit(probs, y, order, start, K, b, k, scale), w2[k * H + j]));
  dh[b * H + j] = pre[b * H + j] > 0.0f ? s : 0.0f;
}

/* dW1 += dpre x, db1 += dpre: block j = hidden unit, thread i = input, rows in order */
__global__ static void back1(const float *dpre, const float *x, const int *order, int start, int B, int H,
                             float *dw1, float *db1) {
  int j = blockIdx.x, i = threadIdx.x, in = blockDim.x;
  for (int b = 0; b < B; b++) {
    float d = dpre[b * H + j];
    if (i == 0) db1[j] = ADD(db1[j], d);
    dw1[j * in + i] = ADD(dw1[j * in + i], MUL(d, x[(size_t)order[start + b] * in + i]));
  }
}

static float *at(const cuda_mlp *m, float *base, int t) { return base + m->views[t].offset; }

static int cuda_mlp_forward(void *user, void *batch, int training, double *loss) {
  cuda_mlp *m = (cuda_mlp *)user;
  const cuda_spirals *d = (const cuda_spirals *)batch;
  int B = d->cur_n, H = m->hidden;
  (void)training; (void)loss; /* the loss stays on the device: tr_model.device_loss */
  if (B < 1 || B > m->max_batch) return 1;
  m->data = d; m->start = d->cur_start; m->batch = B;
  layer1<<<B, H>>>(d->d_x, d->d_order, m->start, m->in, at(m, m->d_params, MLP_W1), at(m, m->d_params, MLP_B1),
                   m->d_pre, m->d_h);
  layer2<<<(B + 127) / 128, 128>>>(m->d_h, d->d_y, d->d_order, m->start, B, H, m->classes, at(m, m->d_params, MLP_W2),
                                   at(m, m->d_params, MLP_B2), m->d_probs, m->d_losses);
  return trc_loss_mean(m->d_losses, (size_t)B, m->d_loss, NULL);
}

static int cuda_mlp_backward(void *user, void *batch) {
  cuda_mlp *m = (cuda_mlp *)user;
  const cuda_spirals *d = m->data;
  int B = m->batch, H = m->hidden, K = m->classes;
  float scale = 1.0f / (float)B; /* mlp_backward(m, 1.0f): dloss / B */
  (void)batch;
  back2<<<K, H>>>(m->d_probs, d->d_y, d->d_order, m->start, B, K, m->d_h, scale, at(m, m->d_grads, MLP_W2),
                  at(m, m->d_grads, MLP_B2));
  back_h<<<B, H>>>(m->d_probs, d->d_y, d->d_order, m->start, K, at(m, m->d_params, MLP_W2), m->d_pre, scale, m->d_dh);
  back1<<<H, m->in>>>(m->d_dh, d->d_x, d->d_order, m->start, B, H, at(m, m->d_grads, MLP_W1), at(m, m->d_grads, MLP_B1));
  return (int)cudaGetLastError();
}

extern "C" tr_model cuda_mlp_tr_model(cuda_mlp *m) {
  tr_model model;
  memset(&model, 0, sizeof model);
  model.params = m->d_params;
  model.grads = m->d_grads;
  model.n_params = m->num_params;
  model.tensors = m->views;
  model.n_tensors = MLP_NUM_TENSORS;
  model.user = m;
  model.forward = cuda_mlp_forward;
  model.backward = cuda_mlp_backward;
  model.on_device = 1;
  model.device_loss = m->d_loss;
  return model;
}
