# train.h's per-step passes (AdamW, SGD, zero_grad, scale, norm, clip by value, NaN/Inf scan) against a
# STREAM triad timed in the same run: ms, GB/s and the ratio, at 1M and 16M parameters, 1 and 2 threads.
#   make bench          (all benches)     make bench-math    (this one; about 20 s)
# Built with the default CFLAGS plus -fopenmp (the 2-thread rows); MATH_BENCH_ROUNDS=N for more rounds.
MATH_BENCH_ROUNDS ?= 0

.PHONY: bench-math
BENCH_TARGETS += bench-math

$(BUILD)/math_bench: bench/math_bench.c hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -fopenmp $< -o $@ $(LDLIBS)

bench-math: $(BUILD)/math_bench
	@echo "CC=$(CC) CFLAGS=$(CFLAGS) -fopenmp"
	@$(BUILD)/math_bench $(MATH_BENCH_ROUNDS)
