/* tests/ref_f32.h - the plain float32 reference of PyTorch's AdamW and SGD (tests/ref_f32.c). */
#ifndef REF_F32_H
#define REF_F32_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
/* One AdamW step (step = 1 for the first) over n elements. */
void ref_adamw_f32(float *p, const float *g, float *m, float *v, size_t n, double lr, double beta1,
                   double beta2, double eps, double wd, long step);
/* One SGD step; first = the momentum buffer is empty (buf may be NULL when momentum is 0). */
void ref_sgd_f32(float *p, const float *g, float *buf, size_t n, double lr, double momentum,
                 double dampening, double wd, int nesterov, int first);
#ifdef __cplusplus
}
#endif
#endif
