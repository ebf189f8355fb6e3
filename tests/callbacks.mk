# tests/callbacks.mk - train.h's standard callbacks (tests/test_callbacks.c): early_stopping,
# model_checkpoint (two processes in one dirpath too), timer, their factories and exact resume: plain, ASan+UBSan, valgrind. (The test
# uses C99 compound literals; the section itself builds as C++ in test-train-compile.)
$(eval $(call cmocka_suite,callbacks,callbacks,hooks.h train.h,-fsanitize=float-cast-overflow,shared))

# ---- fuzzing every stateful callback's load_state ------------------------------------------------------
# tests/fuzz_cbstate.c: the input's first byte picks early_stopping, model_checkpoint, timer, nan_guard,
# ema or lr_finder; the rest is its state. Refused: unchanged; accepted: a stable save round trip and a
# short fit (ASan + UBSan). The seeds are written by the target itself at start; it works in a private
# directory under /tmp (hence the absolute paths). A smoke run by default
# (make test stays fast); longer: make test-fuzz-cbstate FUZZ_CBSTATE_RUNS=200000. A crash leaves
# $(BUILD)/fuzz-cbstate-crash-* to reproduce with ./$(BUILD)/fuzz_cbstate <file>.
FUZZ_CBSTATE_RUNS ?= 3000
.PHONY: test-fuzz-cbstate
TEST_TARGETS += test-fuzz-cbstate
$(BUILD)/fuzz_cbstate: tests/fuzz_cbstate.c hooks.h train.h | $(BUILD)
	$(FUZZ_CC) -std=c99 -g -O1 -fsanitize=fuzzer,address,undefined,float-cast-overflow -fno-sanitize-recover=all \
	  $(WARN) -I. -I$(STB_INC) -o $@ tests/fuzz_cbstate.c $(LDLIBS)

test-fuzz-cbstate: $(BUILD)/fuzz_cbstate
	@mkdir -p $(BUILD)/fuzz_cbstate_corpus
	@echo "fuzz_cbstate: $(FUZZ_CBSTATE_RUNS) inputs (log: $(BUILD)/fuzz_cbstate.log)"
	@FUZZ_CBSTATE_SEED_DIR=$(abspath $(BUILD))/fuzz_cbstate_corpus ./$(BUILD)/fuzz_cbstate -runs=$(FUZZ_CBSTATE_RUNS) -max_len=2048 \
	  -timeout=10 -print_final_stats=1 -artifact_prefix=$(abspath $(BUILD))/fuzz-cbstate- $(abspath $(BUILD))/fuzz_cbstate_corpus \
	  > $(BUILD)/fuzz_cbstate.log 2>&1 \
	  || { tail -n 60 $(BUILD)/fuzz_cbstate.log; echo "fuzz_cbstate: FAILED (reproduce: ./$(BUILD)/fuzz_cbstate $(BUILD)/fuzz-cbstate-crash-...)"; exit 1; }
	@grep -E "^(Done|stat::number_of_executed_units)" $(BUILD)/fuzz_cbstate.log | tail -n 2
