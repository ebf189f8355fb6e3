/* examples/cuda_mlp.h - examples/mlp.h's spirals MLP on the GPU, for train.h with TRAIN_CUDA.

   The same model, the same numbers (weights from mlp_init, the same data), with forward and backward as
   CUDA kernels in cuda_mlp.cu. Parameters, gradients and activations live on the device; the dataset
   is uploaded once and batches are gathered on the device, so a training step moves no data to or from
   the host. Plain C declarations: a C file includes this, cuda_mlp.cu (nvcc) implements it.

   cuda_mlp.cu is also the program's one CUDA translation unit: it holds hooks.h's and train.h's
   implementation compiled with TRAIN_CUDA, and with it the kernels of kernels/train_cuda.cuh. */
#ifndef CUDA_MLP_H
#define CUDA_MLP_H

#include "train.h"
#include "kernels/train_cuda.cuh"
#include "examples/mlp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A spirals dataset on the device: points, labels and the visiting order. */
typedef struct cuda_spirals {
  spirals *host;          /* the CPU dataset it mirrors (its shuffle decides the order) */
  float *d_x;             /* n x 2 */
  int *d_y, *d_order;     /* n each */
  int batch_size;
  int shuffle;
  int cur_start, cur_n;   /* the batch handed out last: rows order[start .. start+n) */
} cuda_spirals;

typedef struct cuda_mlp {
  int in, hidden, classes, max_batch;
  size_t num_params;
  tr_tensor views[MLP_NUM_TENSORS];       /* the same names and layout as mlp.h's */
  float *d_params, *d_grads;              /* device, num_params each */
  float *d_pre, *d_h, *d_probs, *d_dh;    /* activations of the last forward, max_batch rows */
  float *d_losses, *d_loss;               /* per-sample losses, and their mean (tr_model.device_loss) */
  const cuda_spirals *data;               /* the batch of the last forward */
  int start, batch;
} cuda_mlp;

/* Copy a CPU model's sizes and parameters to the device (0, or a CUDA error code). */
int  cuda_mlp_init(cuda_mlp *m, const mlp *cpu);
/* Copy the parameters back into a CPU model of the same shape (waits for the GPU). */
int  cuda_mlp_to_host(const cuda_mlp *m, mlp *cpu);
void cuda_mlp_free(cuda_mlp *m);
int  cuda_spirals_init(cuda_spirals *d, spirals *host, int batch_size, int shuffle);
void cuda_spirals_free(cuda_spirals *d);

/* The glue train.h needs: an on_device tr_model and a tr_data whose batches are device row ranges. */
tr_model cuda_mlp_tr_model(cuda_mlp *m);
tr_data  cuda_spirals_tr_data(cuda_spirals *d);

#ifdef __cplusplus
}
#endif

/* The device buffers and the dataset, compiled in cuda_mlp.cu (CUDA_MLP_IMPLEMENTATION): plumbing, not the
   lesson, which is the kernels there. */
#ifdef CUDA_MLP_IMPLEMENTATION
#ifdef __cplusplus
extern "C" {
#endif
int cuda_mlp_init(cuda_mlp *m, const mlp *cpu) {
  size_t n = cpu->num_params, rows = (size_t)cpu->max_batch;
  int e = 0;
  memset(m, 0, sizeof *m);
  m->in = cpu->in; m->hidden = cpu->hidden; m->classes = cpu->classes; m->max_batch = cpu->max_batch;
  m->num_params = n;
  for (int t = 0; t < MLP_NUM_TENSORS; t++) {
    m->views[t].name = cpu->tensors[t].name;
    m->views[t].offset = cpu->tensors[t].offset;
    m->views[t].count = cpu->tensors[t].count;
  }
  if (m->hidden > 1024 || m->in > 1024) return (int)cudaErrorInvalidValue; /* one block per row / unit */
  e = e ? e : trc_malloc((void **)&m->d_params, n * 4);
  e = e ? e : trc_malloc((void **)&m->d_grads, n * 4);
  e = e ? e : trc_malloc((void **)&m->d_pre, rows * m->hidden * 4);
  e = e ? e : trc_malloc((void **)&m->d_h, rows * m->hidden * 4);
  e = e ? e : trc_malloc((void **)&m->d_dh, rows * m->hidden * 4);
  e = e ? e : trc_malloc((void **)&m->d_probs, rows * m->classes * 4);
  e = e ? e : trc_malloc((void **)&m->d_losses, rows * 4);
  e = e ? e : trc_malloc((void **)&m->d_loss, 4);
  e = e ? e : trc_copy_to_device(m->d_params, cpu->params, n * 4, NULL);
  e = e ? e : trc_memset(m->d_grads, 0, n * 4, NULL);
  if (e) cuda_mlp_free(m);
  return e;
}

int cuda_mlp_to_host(const cuda_mlp *m, mlp *cpu) { return trc_copy_to_host(cpu->params, m->d_params, m->num_params * 4, NULL); }

void cuda_mlp_free(cuda_mlp *m) {
  float *bufs[] = { m->d_params, m->d_grads, m->d_pre, m->d_h, m->d_dh, m->d_probs, m->d_losses, m->d_loss };
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) trc_free(bufs[i]);
  memset(m, 0, sizeof *m);
}

int cuda_spirals_init(cuda_spirals *d, spirals *host, int batch_size, int shuffle) {
  size_t n = (size_t)host->n;
  int e = 0;
  memset(d, 0, sizeof *d);
  d->host = host; d->batch_size = batch_size; d->shuffle = shuffle;
  e = e ? e : trc_malloc((void **)&d->d_x, n * 2 * 4);
  e = e ? e : trc_malloc((void **)&d->d_y, n * 4);
  e = e ? e : trc_malloc((void **)&d->d_order, n * 4);
  e = e ? e : trc_copy_to_device(d->d_x, host->x, n * 2 * 4, NULL);
  e = e ? e : trc_copy_to_device(d->d_y, host->y, n * 4, NULL);
  e = e ? e : trc_copy_to_device(d->d_order, host->order, n * 4, NULL);
  if (e) cuda_spirals_free(d);
  return e;
}

void cuda_spirals_free(cuda_spirals *d) {
  trc_free(d->d_x); trc_free(d->d_y); trc_free(d->d_order);
  memset(d, 0, sizeof *d);
}

static int64_t cuda_spirals_count(void *user) {
  const cuda_spirals *d = (const cuda_spirals *)user;
  return spirals_num_batches(d->host, d->batch_size);
}

/* A batch is a row range of the device order: nothing moves. */
static int cuda_spirals_get(void *user, int64_t index, void **batch) {
  cuda_spirals *d = (cuda_spirals *)user;
  int64_t start = index * d->batch_size;
  if (index < 0 || start >= d->host->n) return 1;
  d->cur_start = (int)start;
  d->cur_n = (int)(d->host->n - start < d->batch_size ? d->host->n - start : d->batch_size);
  *batch = d;
  return 0;
}

/* The CPU dataset's shuffle (the same order as the CPU run), then one upload per epoch. (From pageable
   memory, CUDA may wait for the stream before such a copy: once per epoch, not per step; a program
   that cares uploads from pinned memory.) */
static void cuda_spirals_shuffle(void *user, tr_rng *rng) {
  cuda_spirals *d = (cuda_spirals *)user;
  spirals_shuffle(d->host, tr_rng_u64(rng));
  trc_copy_to_device(d->d_order, d->host->order, (size_t)d->host->n * 4, NULL);
}

tr_data cuda_spirals_tr_data(cuda_spirals *d) {
  tr_data data;
  memset(&data, 0, sizeof data);
  data.user = d;
  data.count = cuda_spirals_count;
  data.get = cuda_spirals_get;
  data.shuffle = d->shuffle ? cuda_spirals_shuffle : NULL;
  data.batch_size = d->batch_size;
  return data;
}

#ifdef __cplusplus
}
#endif
#endif /* CUDA_MLP_IMPLEMENTATION */
#endif /* CUDA_MLP_H */
