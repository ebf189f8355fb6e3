# bench/compile.mk - compile time of the headers' implementation TUs against stb_image.h's
# (bench/bench_compile.c; Debian's libstb-dev provides <stb/stb_image.h>).
#   make bench-compile                        gcc, 5 rounds (about 3 minutes on a 2-core VM)
#   make bench-compile BENCH_COMPILE_CC=clang BENCH_COMPILE_ROUNDS=3
# Rows (the table at the top of bench/bench_compile.c) are a label and its flags (-D, or an -O overriding
# the column's); a row whose define its header does not know yet is listed, not timed. Timed by the
# compiler's CPU time (user + sys of the compiler and what it runs, getrusage(RUSAGE_CHILDREN)), not the
# wall clock: medians, and ratios to stb_image.h's compile in the same round at the same flags (-O2, and
# -O3 -march=native) as a median with its min-max over the rounds; the -O2 object's code + data; no
# thresholds.
BENCH_COMPILE_CC     ?= gcc
BENCH_COMPILE_ROUNDS ?= 5

.PHONY: bench-compile
BENCH_TARGETS += bench-compile
BENCH_BINS += bench_compile

$(BUILD)/bench_compile: bench/bench_compile.c | $(BUILD)
	$(CC) $(ALL_CFLAGS) $< -o $@

bench-compile: $(BUILD)/bench_compile
	@test -f $(STB_INC)/stb/stb_image.h || { echo "bench-compile: $(STB_INC)/stb/stb_image.h not found: install libstb-dev (sh scripts/deps.sh)"; exit 1; }
	@$(BUILD)/bench_compile "$(BENCH_COMPILE_CC)" $(STB_INC) $(BENCH_COMPILE_ROUNDS)
