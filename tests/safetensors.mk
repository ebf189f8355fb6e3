# tests/safetensors.mk - train/safetensors.h and model_checkpoint(save_safetensors=true) (tests/test_safetensors.c):
#   test-safetensors-unit / -asan / -valgrind   cmocka: round trips, the mismatch list, every bad file refused with
#                                               its sentence, sidecars in tr_fit, a pretrained start (~1 s each)
#   test-safetensors-python   the real safetensors package (numpy API, pip, in the top Makefile's
#                             PY_VENV): what C wrote reads equal in Python, what Python wrote loads equal in C (~1 s)
#   test-fuzz-safetensors     libFuzzer on tr_safetensors_check, $(FUZZ_ST_RUNS) inputs (~4 s; longer:
#                             make test-fuzz-safetensors FUZZ_ST_RUNS=1000000)
ST_BIN  := $(BUILD)/test_safetensors
ST_TMP  := $(BUILD)/st_tmp
FUZZ_ST_RUNS ?= 100000

$(eval $(call cmocka_suite,safetensors,safetensors,hooks.h train.h,,shared))
.PHONY: test-safetensors-python test-fuzz-safetensors
TEST_TARGETS += test-fuzz-safetensors
test-safetensors: test-safetensors-python

test-safetensors-python: $(ST_BIN) $(PY_VENV_OK)
	rm -rf $(ST_TMP) && mkdir -p $(ST_TMP)
	./$(ST_BIN) --write $(ST_TMP)
	$(PY_VENV)/bin/python tests/st_check.py $(ST_TMP)
	./$(ST_BIN) --read $(ST_TMP)/py.safetensors
	rm -rf $(ST_TMP)

$(BUILD)/fuzz_safetensors: tests/fuzz_safetensors.c hooks.h train.h | $(BUILD)
	$(FUZZ_CC) -std=c99 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	  $(WARN) -I. -I$(STB_INC) -o $@ tests/fuzz_safetensors.c $(LDLIBS)
test-fuzz-safetensors: $(BUILD)/fuzz_safetensors
	@mkdir -p $(BUILD)/fuzz_st_corpus
	@echo "fuzz_safetensors: $(FUZZ_ST_RUNS) inputs (log: $(BUILD)/fuzz_safetensors.log)"
	@FUZZ_ST_SEED_DIR=$(abspath $(BUILD))/fuzz_st_corpus ./$(BUILD)/fuzz_safetensors -runs=$(FUZZ_ST_RUNS) -max_len=1024 \
	  -timeout=10 -print_final_stats=1 -artifact_prefix=$(abspath $(BUILD))/fuzz-st- $(abspath $(BUILD))/fuzz_st_corpus \
	  > $(BUILD)/fuzz_safetensors.log 2>&1 \
	  || { tail -n 60 $(BUILD)/fuzz_safetensors.log; echo "fuzz_safetensors: FAILED (reproduce: ./$(BUILD)/fuzz_safetensors $(BUILD)/fuzz-st-crash-...)"; exit 1; }
	@grep -E "^(Done|stat::number_of_executed_units)" $(BUILD)/fuzz_safetensors.log | tail -n 2
