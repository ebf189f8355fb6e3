/* tests/cuda_host.h - kernels/train_cuda.cuh's trc_* functions run on the CPU, for tests only.

   Include it after train.h's implementation compiled with TRAIN_CUDA and TRAIN_CUDA_NO_KERNELS: train.h's
   CUDA section then drives these functions instead of kernels, on host memory, so its control flow
   (what is copied when, the wait count, clipping folded or applied, checkpoints through host mirrors,
   errors) is tested on every machine. Each function does what its kernel does, with train.h's CPU passes
   (the norm in hk_sumsq's order rather than the GPU's fixed grid). Waits are counted as the real ones.
   cuda_host_fail_malloc_after = k makes the (k+1)-th trc_malloc fail, to test error paths. Every call
   must come with the model's stream (&cuda_host_stream); cuda_host_wrong_stream counts the others. */
#ifndef CUDA_HOST_H
#define CUDA_HOST_H
#include <stdlib.h>
#include <string.h>

static unsigned long long cuda_host_syncs;
static int cuda_host_fail_malloc_after = -1; /* < 0: never */
static int cuda_host_no_device;
static char cuda_host_stream;            /* the test's models use &cuda_host_stream as their stream */
static unsigned long long cuda_host_wrong_stream; /* calls that came with another stream */
#define CUDA_HOST_STREAM(s) (cuda_host_wrong_stream += (s) != (void *)&cuda_host_stream)

int trc_zero(float *d_x, size_t n, void *stream) { CUDA_HOST_STREAM(stream); tr_zero(d_x, n, 1); return 0; }
int trc_scale(float *d_x, size_t n, float k, void *stream) { CUDA_HOST_STREAM(stream); tr_scale(d_x, n, k, 1); return 0; }
int trc_apply_clip(float *d_g, size_t n, const trc_ctrl *c, void *stream) {
  CUDA_HOST_STREAM(stream);
  if (c->clip_scale != 1.0f && !c->skip) tr_scale(d_g, n, c->clip_scale, 1);
  return 0;
}
static void cuda_host_finish(trc_ctrl *c, double sumsq, double max_norm, int skip_nonfinite) {
  c->sumsq = sumsq;
  c->norm = sqrt(sumsq);
  c->nonfinite = !hk_is_finite(sumsq);
  c->clip_scale = trc_clip_scale(c->norm, max_norm);
  c->skip = skip_nonfinite && c->nonfinite;
}
int trc_norm(const float *d_x, size_t n, double *d_partials, trc_ctrl *d_ctrl, double max_norm, int skip_nonfinite,
             void *stream) {
  (void)d_partials; CUDA_HOST_STREAM(stream);
  cuda_host_finish(d_ctrl, hk_sumsq(d_x, n), max_norm, skip_nonfinite);
  return 0;
}
int trc_clip_value(float *d_g, size_t n, float limit, double *d_partials, trc_ctrl *d_ctrl, void *stream) {
  (void)d_partials; CUDA_HOST_STREAM(stream);
  cuda_host_finish(d_ctrl, tr_clamp_sumsq(d_g, n, -limit, limit, 1), 0, 0);
  return 0;
}
int trc_adamw(float *d_p, float *d_g, float *d_m, float *d_v, size_t n, tr_adamw_coef c, const trc_ctrl *d_ctrl,
              void *stream) {
  CUDA_HOST_STREAM(stream);
  if (d_ctrl && d_ctrl->skip) return 0;
  if (d_ctrl) c.gscale = d_ctrl->clip_scale;
  tr_adamw_update(d_p, d_g, d_m, d_v, n, &c, 1);
  return 0;
}
int trc_sgd(float *d_p, float *d_g, float *d_buf, size_t n, tr_sgd_coef c, const trc_ctrl *d_ctrl, void *stream) {
  CUDA_HOST_STREAM(stream);
  if (d_ctrl && d_ctrl->skip) return 0;
  if (d_ctrl) c.gscale = d_ctrl->clip_scale;
  tr_sgd_update(d_p, d_g, d_buf, n, &c, 1);
  return 0;
}
int trc_ema(float *d_avg, const float *d_p, size_t n, double w, void *stream) { /* ema.h's CPU loop */
  size_t i;
  CUDA_HOST_STREAM(stream);
  for (i = 0; i < n; i++) d_avg[i] = (float)((double)d_avg[i] + w * ((double)d_p[i] - (double)d_avg[i]));
  return 0;
}
int trc_swap(float *d_a, float *d_b, size_t n, void *stream) {
  size_t i;
  CUDA_HOST_STREAM(stream);
  for (i = 0; i < n; i++) { float x = d_a[i]; d_a[i] = d_b[i]; d_b[i] = x; }
  return 0;
}
int trc_count_nonfinite(const float *d_x, size_t n, unsigned long long *d_count, void *stream) {
  CUDA_HOST_STREAM(stream);
  *d_count += tr_count_nonfinite(d_x, n, 1);
  return 0;
}
int trc_histogram(const float *d_x, size_t n, float lo, float hi, int bins, unsigned long long *d_counts, void *stream) {
  size_t i;
  float width = (hi - lo) / (float)bins;
  CUDA_HOST_STREAM(stream);
  if (bins < 1 || bins > 4096 || !(lo < hi)) return 1;
  memset(d_counts, 0, sizeof *d_counts * (size_t)(bins + 3));
  for (i = 0; i < n; i++) d_counts[tr_hist_bin(d_x[i], lo, hi, width, bins)]++;
  return 0;
}
int trc_loss_mean(const float *d_losses, size_t n, float *d_mean, void *stream) {
  double s = 0;
  size_t i;
  CUDA_HOST_STREAM(stream);
  if (n == 0) return 1;
  for (i = 0; i < n; i++) s += d_losses[i];
  *d_mean = (float)(s / (double)n);
  return 0;
}
int trc_malloc(void **d_p, size_t bytes) {
  if (cuda_host_fail_malloc_after == 0) return 2; /* "out of memory" */
  if (cuda_host_fail_malloc_after > 0) cuda_host_fail_malloc_after--;
  *d_p = malloc(bytes ? bytes : 1);
  return *d_p ? 0 : 2;
}
void trc_free(void *d_p) { free(d_p); }
int trc_memset(void *d_p, int byte, size_t bytes, void *stream) { CUDA_HOST_STREAM(stream); memset(d_p, byte, bytes); return 0; }
int trc_copy_to_device(void *d_dst, const void *src, size_t bytes, void *stream) { CUDA_HOST_STREAM(stream); memcpy(d_dst, src, bytes); return 0; }
int trc_copy_on_device(void *d_dst, const void *d_src, size_t bytes, void *stream) { CUDA_HOST_STREAM(stream); memcpy(d_dst, d_src, bytes); return 0; }
int trc_copy_to_host(void *dst, const void *d_src, size_t bytes, void *stream) { CUDA_HOST_STREAM(stream); cuda_host_syncs++; memcpy(dst, d_src, bytes); return 0; }
int trc_synchronize(void *stream) { CUDA_HOST_STREAM(stream); cuda_host_syncs++; return 0; }
unsigned long long trc_sync_count(void) { return cuda_host_syncs; }
const char *trc_error_string(int err) {
  return err == 2 ? "out of memory (emulated)" : err == 100 ? "no CUDA-capable device is detected (emulated)" : "error (emulated)";
}
int trc_device_ok(char *why, size_t n) {
  if (!cuda_host_no_device) return 1;
  snprintf(why, n, "no CUDA-capable device is detected (emulated)");
  return 0;
}
/* the emulated device's PCI bus id (tests/fake_nvml.c knows it); NULL: no device (cudaErrorNoDevice) */
static const char *cuda_host_pci_bus_id;
int trc_pci_bus_id(char *buf, int n) {
  if (!cuda_host_pci_bus_id) return 100;
  snprintf(buf, (size_t)n, "%s", cuda_host_pci_bus_id);
  return 0;
}
#endif /* CUDA_HOST_H */
