/* tests/fake_nvml.c - a stand-in for libnvidia-ml.so.1 (built as a shared library by tests/cuda.mk), so that
   device_stats's NVML path runs on a machine without a GPU (tests/test_cuda_host.c): the six functions it
   loads, with NVML's signatures; one device, at the PCI bus id tests/cuda_host.h gives, 42% busy, 1 GiB of
   8 GiB used. Status codes are NVML's: 0 success, 6 not found. */
#include <string.h>

typedef struct { unsigned int gpu, memory; } fake_util;
typedef struct { unsigned long long total, free, used; } fake_mem;
static int fake_dev, fake_inits;

int nvmlInit_v2(void) { fake_inits++; return 0; }
int nvmlShutdown(void) { fake_inits--; return 0; }
const char *nvmlErrorString(int status) { return status == 6 ? "Not Found" : status ? "Unknown Error" : "Success"; }
int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, void **dev) {
  if (!fake_inits || strcmp(bus, "00000000:65:00.0")) return 6;
  *dev = &fake_dev;
  return 0;
}
int nvmlDeviceGetUtilizationRates(void *dev, fake_util *u) {
  if (dev != &fake_dev) return 999;
  u->gpu = 42, u->memory = 7;
  return 0;
}
int nvmlDeviceGetMemoryInfo(void *dev, fake_mem *m) {
  if (dev != &fake_dev) return 999;
  m->total = 8ull << 30, m->used = 1ull << 30, m->free = m->total - m->used;
  return 0;
}
