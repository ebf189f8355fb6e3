/* tests/ref_f32.c - PyTorch's torch.optim.AdamW and torch.optim.SGD (single-tensor path, float32
   tensors, float lr) written out plainly: one loop per tensor operation, in the order PyTorch runs
   them, each operation rounding to float as a float32 tensor op does. Built with -ffp-contract=off
   (tests/math.mk, tests/train.mk) so no multiply is fused with an add. train.h's fused, vectorised
   passes must give the same bits (tests/test_math.c, tests/test_train.c).

   The Python scalars (1 - lr*wd, 1 - beta1, lr / bias_correction1, ...) are computed in double, as
   Python does, and become float when a float32 tensor op takes them. Independent of train.h on
   purpose: it includes nothing of it. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include "ref_f32.h"

/* torch.lerp on float tensors with a scalar weight (ATen's scalar formula). */
static float ref_lerp(float self, float end, float w) {
  return fabsf(w) < 0.5f ? self + w * (end - self) : end - (end - self) * (1.0f - w);
}

void ref_adamw_f32(float *p, const float *g, float *m, float *v, size_t n, double lr, double beta1,
                   double beta2, double eps, double wd, long step) {
  size_t i;
  double bc1 = 1 - pow(beta1, (double)step), bc2 = 1 - pow(beta2, (double)step);
  double step_size = lr / bc1, bc2_sqrt = sqrt(bc2);
  float *denom = (float *)malloc(n * sizeof(float) + 1); /* PyTorch's temporary tensor */
  if (!denom) abort();
  if (wd != 0)
    for (i = 0; i < n; i++) p[i] = p[i] * (float)(1 - lr * wd);                    /* param.mul_ */
  for (i = 0; i < n; i++) m[i] = ref_lerp(m[i], g[i], (float)(1 - beta1));          /* exp_avg.lerp_ */
  for (i = 0; i < n; i++) v[i] = v[i] * (float)beta2;                               /* exp_avg_sq.mul_ */
  for (i = 0; i < n; i++) v[i] = v[i] + (float)(1 - beta2) * g[i] * g[i];           /* .addcmul_ */
  for (i = 0; i < n; i++) denom[i] = sqrtf(v[i]);                                   /* exp_avg_sq.sqrt() */
  for (i = 0; i < n; i++) denom[i] = denom[i] / (float)bc2_sqrt;                    /* / bc2_sqrt */
  for (i = 0; i < n; i++) denom[i] = denom[i] + (float)eps;                         /* .add_(eps) */
  for (i = 0; i < n; i++) p[i] = p[i] + (float)-step_size * m[i] / denom[i];        /* param.addcdiv_ */
  free(denom);
}

void ref_sgd_f32(float *p, const float *g, float *buf, size_t n, double lr, double momentum,
                 double dampening, double wd, int nesterov, int first) {
  size_t i;
  for (i = 0; i < n; i++) {
    float d = g[i];
    if (wd != 0) d = d + (float)wd * p[i];                                          /* grad.add(p, alpha=wd) */
    if (momentum != 0) {
      if (first) buf[i] = d;                                                        /* torch.clone(grad) */
      else {
        buf[i] = buf[i] * (float)momentum;                                          /* buf.mul_(momentum) */
        buf[i] = buf[i] + (float)(1 - dampening) * d;                               /* .add_(d, alpha=1-damp) */
      }
      d = nesterov ? d + (float)momentum * buf[i] : buf[i];                         /* grad.add(buf, alpha=mu) */
    }
    p[i] = p[i] + (float)-lr * d;                                                   /* param.add_(d, alpha=-lr) */
  }
}
