# bench/build.mk - test-bench-build (in make test): every bench's program builds, so that none can rot
# while nobody runs make bench. Built at -O0 into $(BUILD)/bench-build (what make bench runs is the -O2
# build in $(BUILD)): the check is that each compiles, warning-free, and links, and -O0 does that in a
# fifth of the time (about 25 s of CPU for all of them on a 2-core VM). Each bench fragment lists its
# programs in BENCH_BINS (names under $(BUILD)); the CUDA bench is test-cuda-build's.
BENCH_BUILD := $(BUILD)/bench-build
.PHONY: test-bench-build
TEST_TARGETS += test-bench-build
test-bench-build:
	@$(MAKE) --no-print-directory BUILD=$(BENCH_BUILD) CFLAGS='-std=c99 -O0' $(addprefix $(BENCH_BUILD)/,$(BENCH_BINS)) \
	  && echo "test-bench-build: every bench builds: $(BENCH_BINS)"
