# bench/safetensors.mk - tr_safetensors_save against a copy of the same file on the disk under build/
# (bench/bench_safetensors.c: ratio, goal, verdict).   make bench-safetensors   ST_BENCH_MB=512 make bench-safetensors
.PHONY: bench-safetensors
BENCH_TARGETS += bench-safetensors
BENCH_BINS += bench_safetensors

$(BUILD)/bench_safetensors: bench/bench_safetensors.c bench/bench.h hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -O2 $< -o $@ $(LDLIBS)

bench-safetensors: $(BUILD)/bench_safetensors
	@$(BUILD)/bench_safetensors $(BUILD)
