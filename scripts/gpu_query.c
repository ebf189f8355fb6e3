/* scripts/gpu_query.c - what scripts/gpu_check.sh needs to know about the GPU, from the CUDA runtime
   itself (nvidia-smi may be missing, or older than its compute_cap field). Plain C against
   cuda_runtime_api.h, built by the script with the host compiler and -lcudart. Prints key=value lines:
     runtime=13000 driver=13000 devices=1 name=... cc=9.0 sms=132 mem_mib=81079
   or, without a usable device, error=the runtime's message (and exits 0: the caller decides). */
#include <cuda_runtime_api.h>
#include <stdio.h>

int main(void) {
  int runtime = 0, driver = 0, count = 0;
  struct cudaDeviceProp prop;
  cudaError_t e;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver); /* 0 when no driver is loaded */
  printf("runtime=%d\ndriver=%d\n", runtime, driver);
  e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count < 1) {
    printf("devices=0\nerror=%s\n", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device found");
    return 0;
  }
  e = cudaGetDeviceProperties(&prop, 0);
  if (e != cudaSuccess) { printf("devices=%d\nerror=%s\n", count, cudaGetErrorString(e)); return 0; }
  printf("devices=%d\nname=%s\ncc=%d.%d\nsms=%d\nmem_mib=%zu\n", count, prop.name, prop.major, prop.minor,
         prop.multiProcessorCount, prop.totalGlobalMem >> 20);
  return 0;
}
