# bench/log.mk - what logging costs (bench/bench_log.c): the demo's MLP trained with and without every
# logger and the progress bar, a record every 50 steps; the ratio comes from one run.
#   make bench-log
.PHONY: bench-log
BENCH_TARGETS += bench-log
BENCH_BINS += bench_log

$(BUILD)/bench_log: bench/bench_log.c hooks.h train.h examples/mlp.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS)

bench-log: $(BUILD)/bench_log
	@echo "CC=$(CC) CFLAGS=$(CFLAGS)"
	@rm -rf $(BUILD)/bench_log_runs; $(BUILD)/bench_log $(BUILD)/bench_log_runs

# bench/bench_mlflow.c - the mlflow logger's cost per step with its server answering, stopped and frozen
# (a record every step; a local server that answers as MLflow, or a real one: build/bench_mlflow URI)
.PHONY: bench-mlflow
BENCH_TARGETS += bench-mlflow
BENCH_BINS += bench_mlflow
$(BUILD)/bench_mlflow: bench/bench_mlflow.c hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $< -o $@ -lcurl -pthread $(LDLIBS)
bench-mlflow: $(BUILD)/bench_mlflow
	@echo "CC=$(CC) CFLAGS=$(CFLAGS)"
	@$(BUILD)/bench_mlflow

# bench/bench_metrics.c - one logged value's cost (callgrind) with 10 to 4,000 metrics a record, every file logger
.PHONY: bench-metrics
BENCH_TARGETS += bench-metrics
BENCH_BINS += bench_metrics
$(BUILD)/bench_metrics: bench/bench_metrics.c hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS)
bench-metrics: $(BUILD)/bench_metrics
	@echo "CC=$(CC) CFLAGS=$(CFLAGS)"
	@$(BUILD)/bench_metrics
