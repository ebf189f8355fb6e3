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
#endif /* CUDA_MLP_H */
