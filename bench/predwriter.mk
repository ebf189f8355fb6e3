# bench/predwriter.mk - prediction_writer's cost when enabled: tr_predict over 10^7 predictions written as csv and
# safetensors, per epoch and per batch, against a copy of the file written, on the disk under build/
# (bench/bench_predwriter.c).   make bench-predwriter   PW_BENCH_FLOATS=100000000 make bench-predwriter
.PHONY: bench-predwriter
BENCH_TARGETS += bench-predwriter
BENCH_BINS += bench_predwriter

$(BUILD)/bench_predwriter: bench/bench_predwriter.c bench/bench.h hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -O2 $< -o $@ $(LDLIBS)

bench-predwriter: $(BUILD)/bench_predwriter
	@$(BUILD)/bench_predwriter $(BUILD)
