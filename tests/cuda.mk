# tests/cuda.mk - the optional CUDA kernels (kernels/train_cuda.cuh) and train.h's section CUDA.
#
#   make test-cuda-build  (in make test) nvcc compiles and links every kernel, the GPU test, the benchmark
#                         and the example, for the pinned architectures below; without nvcc it says it
#                         skipped the CUDA build and succeeds
#   make test-cuda-cpu    (in make test) what needs no GPU: the declarations as C99/C11/C++ (gcc, clang,
#                         g++), the #error of the implementation outside nvcc, tests/test_cuda_cpu.c (the
#                         kernels' clipping against train.h's, the histogram API, on_device refused without
#                         TRAIN_CUDA, ctx->grad_norm_source), tests/test_cuda_host.c (train.h's whole CUDA
#                         path on emulated kernels: the CPU's results bit for bit, the wait count,
#                         checkpoints; plain and ASan+UBSan), and the GPU test binary, which says
#                         "skipped: no CUDA device" and exits 0 on a machine without one
#   make cuda-test        the GPU tests (tests/test_cuda.c): kernels against the CPU, determinism,
#                         training against the CPU, exact resume, CPU/GPU checkpoints, the wait count
#   make cuda-bench       each kernel at 1e8 parameters (CUDA_BENCH_N=...): its bandwidth as a ratio of a
#                         device-to-device copy's in the same run, against the goal
#   make cuda-build       build the three (scripts/gpu_check.sh: make gpu-check, tests/gpu_check.mk)
#   make cuda-demo        examples/cuda_demo.c (the spirals MLP on the GPU)
#
# Architectures are pinned (no GPU is needed to build): sm_80 (A100) and sm_90 (H100) machine code, and
# compute_90 PTX that newer GPUs JIT-compile. Override with CUDA_GENCODE=... for another GPU.
NVCC         ?= nvcc
HAVE_NVCC    := $(shell command -v $(NVCC) 2>/dev/null)
CUDA_HOME    ?= $(if $(HAVE_NVCC),$(patsubst %/bin/,%,$(dir $(HAVE_NVCC))),/usr/local/cuda)
CUDA_GENCODE ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
                -gencode arch=compute_90,code=compute_90
# CUDA_WERROR= (empty): the host compiler's warnings stay warnings (scripts/gpu_check.sh's retry)
CUDA_WERROR  ?= ,-Werror
NVCC_FLAGS    = -O3 -std=c++14 -fmad=false $(CUDA_GENCODE) -I. $(STB_SYSINC) -Xcompiler -Wall,-Wextra$(CUDA_WERROR)
CUDA_LDLIBS   = -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++ -lm
CU_DIR       := $(BUILD)/cuda
CU_DEPS      := hooks.h train.h kernels/train_cuda.cuh examples/mlp.h examples/cuda_mlp.h
CU_BINS      := $(CU_DIR)/test_cuda $(CU_DIR)/cuda_demo $(CU_DIR)/bench_cuda
CUDA_BENCH_N ?= 1e8

.PHONY: test-cuda-build test-cuda-cpu cuda-build cuda-test cuda-bench cuda-demo
TEST_TARGETS += test-cuda-build test-cuda-cpu
BENCH_TARGETS += cuda-bench

$(CU_DIR):
	@mkdir -p $@

# The program's one CUDA file: hooks.h + train.h (TRAIN_CUDA) + kernels + the MLP's kernels.
$(CU_DIR)/cuda_mlp.o: examples/cuda_mlp.cu $(CU_DEPS) | $(CU_DIR)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@
$(CU_DIR)/test_cuda: tests/test_cuda.c $(CU_DIR)/cuda_mlp.o $(CU_DEPS) | $(CU_DIR)
	$(CC) $(ALL_CFLAGS) $< $(CU_DIR)/cuda_mlp.o -o $@ $(CUDA_LDLIBS)
$(CU_DIR)/cuda_demo: examples/cuda_demo.c $(CU_DIR)/cuda_mlp.o $(CU_DEPS) | $(CU_DIR)
	$(CC) $(ALL_CFLAGS) $< $(CU_DIR)/cuda_mlp.o -o $@ $(CUDA_LDLIBS)
$(CU_DIR)/bench_cuda.o: bench/bench_cuda.cu $(CU_DEPS) | $(CU_DIR)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@
$(CU_DIR)/bench_cuda: $(CU_DIR)/bench_cuda.o
	$(CC) $< -o $@ $(CUDA_LDLIBS)

ifeq ($(HAVE_NVCC),)
test-cuda-build:
	@echo "test-cuda-build: skipped the CUDA build: $(NVCC) not found (set NVCC=/path/to/nvcc)"
cuda-build cuda-test cuda-bench cuda-demo:
	@echo "$@: skipped: $(NVCC) not found, the CUDA build needs it"
CU_SKIP_RUN := @echo "test-cuda-cpu: the GPU test was not built ($(NVCC) not found)"
else
# The update kernels (and the weight average's) must hold no fma (the CPU's bits need unfused a*b+c): checked in their PTX, and
# the same check must fail on a build without -fmad=false (so it can fail at all).
CU_PTX_FMA = awk '/^\.visible \.entry .*trc__(adamw|sgd|scale|apply_clip|ema)_kernel/ {on=1} on && /^}/ {on=0} on && /fma\.rn\.f(32|64)/ {n++} END {print n+0}'
test-cuda-build: $(CU_BINS)
	$(NVCC) $(filter-out -gencode arch=%,$(NVCC_FLAGS)) -arch=compute_90 -ptx examples/cuda_mlp.cu -o $(CU_DIR)/cuda_mlp.ptx
	$(NVCC) $(filter-out -fmad=false -gencode arch=%,$(NVCC_FLAGS)) -arch=compute_90 -ptx examples/cuda_mlp.cu -o $(CU_DIR)/cuda_mlp_fmad.ptx
	@n=$$($(CU_PTX_FMA) $(CU_DIR)/cuda_mlp.ptx); f=$$($(CU_PTX_FMA) $(CU_DIR)/cuda_mlp_fmad.ptx); \
	  echo "test-cuda-build: fma.rn in the update and average kernels' PTX: $$n with -fmad=false, $$f without"; \
	  [ "$$n" = 0 ] && [ "$$f" -gt 0 ]
	@echo "test-cuda-build: kernels, test, benchmark and example built for sm_80, sm_90, compute_90"
cuda-build: $(CU_BINS)
cuda-test: $(CU_DIR)/test_cuda
	./$(CU_DIR)/test_cuda $(CU_DIR)
cuda-bench: $(CU_DIR)/bench_cuda
	./$(CU_DIR)/bench_cuda $(CUDA_BENCH_N)
cuda-demo: $(CU_DIR)/cuda_demo
	@rm -rf $(CU_DIR)/checkpoints; ./$(CU_DIR)/cuda_demo $(CU_DIR)/checkpoints
CU_SKIP_RUN := ./$(CU_DIR)/test_cuda $(CU_DIR)
endif

# ---- what runs without a GPU ----------------------------------------------------------------------
CU_DECL := $(CU_DIR)/decl.c
$(CU_DIR)/test_cuda_cpu: tests/test_cuda_cpu.c hooks.h train.h kernels/train_cuda.cuh | $(CU_DIR)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS)
$(CU_DIR)/test_cuda_host: tests/test_cuda_host.c tests/cuda_host.h $(CU_DEPS) $(CU_DIR)/libfake_nvml.so | $(CU_DIR)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS) -ldl
$(CU_DIR)/test_cuda_host_asan: tests/test_cuda_host.c tests/cuda_host.h $(CU_DEPS) $(CU_DIR)/libfake_nvml.so | $(CU_DIR)
	$(CC) $(ALL_CFLAGS) $(SAN) $< -o $@ $(LDLIBS) -ldl
# device_stats's NVML on a machine without one: a stand-in library that test_cuda_host loads
$(CU_DIR)/libfake_nvml.so: tests/fake_nvml.c | $(CU_DIR)
	$(CC) $(ALL_CFLAGS) -shared -fPIC $< -o $@

test-cuda-cpu: $(CU_DIR)/test_cuda_cpu $(CU_DIR)/test_cuda_host $(CU_DIR)/test_cuda_host_asan $(if $(HAVE_NVCC),$(CU_DIR)/test_cuda)
	@printf '#include "kernels/train_cuda.cuh"\n#include "train.h"\nint (*adamw)(float *, float *, float *, float *, size_t, tr_adamw_coef, const trc_ctrl *, void *) = trc_adamw;\nint f(double norm) { trc_ctrl c; c.clip_scale = trc_clip_scale(norm, 1.0); return tr_hist_bin(c.clip_scale, 0.0f, 1.0f, 0.25f, 4) + (int)sizeof c; }\n' > $(CU_DECL)
	gcc -std=c99 $(WARN) -I. -I$(STB_INC) -c $(CU_DECL) -o $(CU_DIR)/decl-c99.o
	clang -std=c11 $(WARN) -I. -I$(STB_INC) -c $(CU_DECL) -o $(CU_DIR)/decl-c11.o
	g++ -std=c++11 $(WARN) -I. -I$(STB_INC) -x c++ -c $(CU_DECL) -o $(CU_DIR)/decl-cxx.o
	@if gcc -std=c99 -DTRAIN_CUDA_IMPLEMENTATION -I. -fsyntax-only -x c $(CU_DECL) 2>$(CU_DIR)/impl-gcc.err; then \
	  echo "test-cuda-cpu: the kernels' implementation compiled without nvcc (expected the #error)"; exit 1; fi
	@grep -q "must be compiled by nvcc" $(CU_DIR)/impl-gcc.err
	./$(CU_DIR)/test_cuda_cpu
	./$(CU_DIR)/test_cuda_host $(CU_DIR)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(CU_DIR)/test_cuda_host_asan $(CU_DIR)
	$(CU_SKIP_RUN)
	@echo "test-cuda-cpu: passed"
