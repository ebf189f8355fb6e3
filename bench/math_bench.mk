# train.h's per-step passes (AdamW, SGD, zero_grad, scale, norm, clip by value, NaN/Inf scan) against
# reference loops at the limit timed in the same run (an in-place axpy, a triad, a copy; bench/math_ref.c,
# checked to be vectorised by make test-math-ref): ms, GB/s and the ratios, at 1M and 16M parameters,
# 1 and 2 threads.
#   make bench          (all benches)     make bench-math    (this one; about 30 s)
# Built with the default CFLAGS plus -fopenmp (the 2-thread rows); MATH_BENCH_ROUNDS=N for more rounds.
MATH_BENCH_ROUNDS ?= 0

.PHONY: bench-math
BENCH_TARGETS += bench-math
BENCH_BINS += math_bench

# The references' own object: what make test-math-ref disassembles is what the bench runs.
$(BUILD)/math_ref.o: bench/math_ref.c bench/math_ref.h hooks.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -fopenmp -c $< -o $@

$(BUILD)/math_bench: bench/math_bench.c bench/math_ref.h $(BUILD)/math_ref.o hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -fopenmp $< $(BUILD)/math_ref.o -o $@ $(LDLIBS)

bench-math: $(BUILD)/math_bench
	@echo "CC=$(CC) CFLAGS=$(CFLAGS) -fopenmp"
	@$(BUILD)/math_bench $(MATH_BENCH_ROUNDS)
