# train.h benchmark: instructions per training step (callgrind, exact) of the spirals MLP trained by
# a hand-written loop, by tr_fit with hook sites compiled out / empty, and with five typical callbacks.
#   make bench          (all benches)     make bench-train    (this one; about 15 s, mostly valgrind)
TRB_DEPS := bench/bench_train.c hooks.h train.h examples/mlp.h

.PHONY: bench-train
BENCH_TARGETS += bench-train
BENCH_BINS += bench_train bench_train_off

bench-train: $(BUILD)/bench_train $(BUILD)/bench_train_off
	@echo "CC=$(CC) CFLAGS=$(CFLAGS)"
	@$(BUILD)/bench_train $(BUILD)/bench_train_off

$(BUILD)/bench_train: $(TRB_DEPS) | $(BUILD)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS)

$(BUILD)/bench_train_off: $(TRB_DEPS) | $(BUILD)
	$(CC) $(ALL_CFLAGS) -DHK_DISABLE $< -o $@ $(LDLIBS)
