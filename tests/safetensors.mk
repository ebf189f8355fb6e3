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

$(eval $(call fuzz_runs,safetensors,FUZZ_ST_SEED_DIR,FUZZ_ST_RUNS,1024,,hooks.h train.h))
