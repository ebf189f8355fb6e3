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
$(eval $(call fuzz_runs,cbstate,FUZZ_CBSTATE_SEED_DIR,FUZZ_CBSTATE_RUNS,2048,$(comma)float-cast-overflow,hooks.h train.h))
