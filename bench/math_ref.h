/* math_ref.h - the reference loops of make bench-math (bench/math_ref.c): what a hand-written loop
   moving the same bytes does at best, against which train.h's passes are measured. */
#ifndef MATH_REF_H
#define MATH_REF_H
#include <stddef.h>

/* a[i] += s*b[i]: the in-place axpy, 12 bytes an element (a read and written, b read); the limit of
   an update that reads and writes its arrays in place, as every optimizer does */
void ref_axpy(float *a, const float *b, size_t n, float s, int threads);
/* a[i] = b[i] + s*c[i]: the STREAM triad, 12 bytes an element (its separate destination also costs a
   read for ownership that STREAM does not count) */
void ref_triad(float *a, const float *b, const float *c, size_t n, float s, int threads);
/* a[i] = b[i]: a copy, 8 bytes an element */
void ref_copy(float *a, const float *b, size_t n, int threads);
/* the sum of a[i]: a read of one array, 4 bytes an element; the limit of the passes that only read
   (the gradient norm, the NaN/Inf scan), which on some machines is well below the axpy's rate */
double ref_read(const float *a, size_t n, int threads);

#endif
