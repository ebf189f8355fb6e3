# tests/gpu_check.mk - scripts/gpu_check.sh: the CUDA path checked on a real GPU in one command.
#
#   make gpu-check       on a machine with a GPU: every CUDA binary built for that GPU (make -j$(nproc)),
#                        then cuda-test, cuda-bench and cuda-demo under timeouts; summary.txt and the raw
#                        logs under $OUT (default gpu-check-out/), the summary printed (docs/cuda.md)
#   make gpu-check-pack  copy stb_ds.h into build/gpu-check-carry/ for a GPU machine without libstb-dev
#   make test-gpu-check  (in make test) the script here, without a second nvcc build: --reuse runs the
#                        binaries test-cuda-build built through to the "no CUDA device" skips and checks
#                        the summary says so (device_stats's NVML row: "skipped: no device"); then a broken CUDA_GENCODE must fail the build loudly (exit
#                        1, nvcc's first error line in the summary, nothing run)
.PHONY: gpu-check gpu-check-pack test-gpu-check
TEST_TARGETS += test-gpu-check
GPU_CHECK_T := $(BUILD)/gpu-check-test

gpu-check:
	@scripts/gpu_check.sh
gpu-check-pack:
	@scripts/gpu_check.sh --pack

ifeq ($(HAVE_NVCC),)
test-gpu-check:
	@echo "test-gpu-check: skipped: $(NVCC) not found (the script runs the CUDA build's binaries)"
else
test-gpu-check: $(CU_BINS)
	@rm -rf $(GPU_CHECK_T); mkdir -p $(GPU_CHECK_T)
	@OUT=$(GPU_CHECK_T)/nodev GPU_CHECK_BUILD_DIR=$(BUILD) scripts/gpu_check.sh --reuse > $(GPU_CHECK_T)/nodev.txt 2>&1 \
	  || { cat $(GPU_CHECK_T)/nodev.txt; echo "test-gpu-check: --reuse failed"; exit 1; }
	@s=$(GPU_CHECK_T)/nodev/summary.txt; if grep -q '^GPU: *none found' $$s; then r='NO DEVICE' st=SKIPPED; else r=PASS st=PASS; fi; \
	  grep -q "^RESULT: $$r" $$s && grep -q "^| cuda-test | $$st " $$s && grep -q "^| cuda-bench | $$st " $$s \
	  && grep -q "^| cuda-demo | $$st " $$s && grep -q '^| host waits in' $$s \
	  && { [ $$st = PASS ] || grep -q '^| device_stats through NVML: .* | skipped: no device |' $$s; } \
	  || { cat $$s; echo "test-gpu-check: expected RESULT $$r and every run $$st in the summary above"; exit 1; }
	@if OUT=$(GPU_CHECK_T)/broken GPU_CHECK_BUILD_DIR=$(GPU_CHECK_T)/b CUDA_GENCODE='-gencode arch=compute_1,code=sm_1' JOBS=2 \
	    scripts/gpu_check.sh > $(GPU_CHECK_T)/broken.txt 2>&1; then \
	  cat $(GPU_CHECK_T)/broken.txt; echo "test-gpu-check: a broken CUDA_GENCODE passed"; exit 1; fi
	@s=$(GPU_CHECK_T)/broken/summary.txt; grep -q '^RESULT: FAIL.*the build first' $$s && grep -q '^first failing lines of build' $$s \
	  && grep -qi 'unsupported gpu architecture' $$s && ! grep -q '^| cuda-test' $$s \
	  || { cat $$s; echo "test-gpu-check: the broken build's summary lacks its error"; exit 1; }
	@echo "test-gpu-check: passed ($$(sed -n 's/^RESULT: \([A-Z ]*\):.*/\1/p' $(GPU_CHECK_T)/nodev/summary.txt) here; a broken build fails with nvcc's error)"
endif
