# bench/log.mk - what logging costs (bench/bench_log.c): the demo's MLP trained with and without every
# logger and the progress bar, a record every 50 steps; the ratio comes from one run.
#   make bench-log
.PHONY: bench-log
BENCH_TARGETS += bench-log

$(BUILD)/bench_log: bench/bench_log.c hooks.h train.h examples/mlp.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS)

bench-log: $(BUILD)/bench_log
	@echo "CC=$(CC) CFLAGS=$(CFLAGS)"
	@rm -rf $(BUILD)/bench_log_runs; $(BUILD)/bench_log $(BUILD)/bench_log_runs
