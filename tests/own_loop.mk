# tests/own_loop.mk - hooks.h in a hand-written loop (included by the top Makefile).
#
#   make test-own-loop     cmocka tests of the own-loop helpers (tests/test_own_loop.c): hk_flow,
#                          HK_FIRE_FLOW, hk_grad_norm and its cache, the bit-level finite checks;
#                          plain, under ASan+UBSan, and under valgrind
#   make test-ofast-loop   tests/ofast_loop.c at -Ofast, with gcc and clang: the host loop's parameters
#                          are bit-identical with and without sites (nothing registered, and with hooks
#                          that only read), and a NaN guard built on hk_is_finitef still fires

OL_SRC  := tests/test_own_loop.c
OL_BIN  := $(BUILD)/test_own_loop
OL_ASAN := $(BUILD)/test_own_loop_asan
OF_DIR  := $(BUILD)/ofast
OF_CCS  := gcc clang

.PHONY: test-own-loop test-own-loop-unit test-own-loop-asan test-own-loop-valgrind test-ofast-loop
TEST_TARGETS += test-own-loop test-ofast-loop
QUICK_TARGETS += test-own-loop-unit test-own-loop-asan

$(OL_BIN): $(OL_SRC) hooks.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $(OL_SRC) -lcmocka $(LDLIBS)
$(OL_ASAN): $(OL_SRC) hooks.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ $(OL_SRC) -lcmocka $(LDLIBS)

# plain, ASan+UBSan and valgrind: three targets, so that make -j runs them side by side
test-own-loop: test-own-loop-unit test-own-loop-asan test-own-loop-valgrind
test-own-loop-unit: $(OL_BIN)
	./$(OL_BIN)
test-own-loop-asan: $(OL_ASAN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(OL_ASAN)
test-own-loop-valgrind: $(OL_BIN)
	$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect ./$(OL_BIN)

$(OF_DIR)/%-nosites: tests/ofast_loop.c hooks.h
	@mkdir -p $(OF_DIR)
	$* -std=c99 -Ofast $(WARN) -I. -I$(STB_INC) -DOFAST_SITES=0 -o $@ $< $(LDLIBS)
$(OF_DIR)/%-sites: tests/ofast_loop.c hooks.h
	@mkdir -p $(OF_DIR)
	$* -std=c99 -Ofast $(WARN) -I. -I$(STB_INC) -DOFAST_SITES=1 -o $@ $< $(LDLIBS)

test-ofast-loop: $(foreach c,$(OF_CCS),$(OF_DIR)/$(c)-nosites $(OF_DIR)/$(c)-sites)
	@set -e; for c in $(OF_CCS); do \
	  d=$(OF_DIR)/$$c; $$d-nosites > $$d-nosites.out; $$d-sites plain > $$d-plain.out; $$d-sites hooks > $$d-hooks.out; \
	  cmp -s $$d-nosites.out $$d-plain.out || { echo "ofast-loop ($$c): sites with nothing registered changed the results"; exit 1; }; \
	  cmp -s $$d-nosites.out $$d-hooks.out || { echo "ofast-loop ($$c): reading hooks changed the results"; exit 1; }; \
	  $$d-sites nan; \
	  echo "ofast-loop ($$c -Ofast): $$(wc -l < $$d-nosites.out) values bit-identical with and without sites"; done

# ---- train.h's run layer in a hand-written loop, and examples/own_loop.c -------------------------------
#   make test-own-run          cmocka tests of the run layer in a step loop (tests/test_own_run.c): plain,
#                              under ASan+UBSan, and under valgrind
#   make test-own-loop-example examples/own_loop.c run as a user would (tests/own_loop.sh): to the end,
#                              resumed bit-exactly (model and callbacks), Ctrl-C, NaN, the log files read back
#   make test-own-loop-tensorboard  its event file read by the real tensorboard package (PY_VENV,
#                              the top Makefile's, made on first use)
OR_SRC  := tests/test_own_run.c
OR_BIN  := $(BUILD)/test_own_run
OR_ASAN := $(BUILD)/test_own_run_asan
OR_TMP  := $(BUILD)/own_loop_tmp

.PHONY: test-own-run test-own-run-unit test-own-run-asan test-own-run-valgrind test-own-loop-example \
        test-own-loop-tensorboard
TEST_TARGETS += test-own-run test-own-loop-example test-own-loop-tensorboard
QUICK_TARGETS += test-own-run-unit test-own-run-asan

$(OR_BIN): $(OR_SRC) tests/own_run_cluster.h examples/mlp.h hooks.h train.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $(OR_SRC) -lcmocka $(LDLIBS)
$(OR_ASAN): $(OR_SRC) tests/own_run_cluster.h examples/mlp.h hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ $(OR_SRC) -lcmocka $(LDLIBS)

# plain, ASan+UBSan and valgrind: three targets, so that make -j runs them side by side
test-own-run: test-own-run-unit test-own-run-asan test-own-run-valgrind
test-own-run-unit: $(OR_BIN)
	./$(OR_BIN)
test-own-run-asan: $(OR_ASAN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(OR_ASAN)
test-own-run-valgrind: $(OR_BIN)
	$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect ./$(OR_BIN)

test-own-loop-example: $(BUILD)/own_loop
	sh tests/own_loop.sh $(abspath $(BUILD)/own_loop) $(OR_TMP)

# $(PY_VENV_OK): the top Makefile's venv
test-own-loop-tensorboard: test-own-loop-example $(PY_VENV_OK)
	$(PY_VENV)/bin/python tests/own_loop_tb.py $(OR_TMP)/full/runs/lightning_logs/version_0

# ---- examples/epoch_loop.c: an epoch loop of your own ---------------------------------------------------------
#   make test-epoch-loop  examples/epoch_loop.c run as a user would (tests/epoch_loop.sh): to the end, resumed from
#                         last.ckpt, a top-k file and after Ctrl-C to the same bits, NaN, the logs read back (the
#                         TensorBoard file by the real tensorboard package)
.PHONY: test-epoch-loop
TEST_TARGETS += test-epoch-loop
test-epoch-loop: $(BUILD)/epoch_loop $(PY_VENV_OK)
	sh tests/epoch_loop.sh $(abspath $(BUILD)/epoch_loop) $(BUILD)/epoch_loop_tmp $(abspath $(PY_VENV)/bin/python)

# ---- reproducers found by integrating the two loop shapes as users would (README and docs/ only) ---------------
#   make test-run-layer-repro  tests/run_layer_repro.sh: a resume with nothing left to train (finished, early-stopped)
#                              refused by tr_run_start before anything runs, as tr_fit refuses it; a warning for
#                              nan_guard's on_before_backward that the loop never fires
.PHONY: test-run-layer-repro
TEST_TARGETS += test-run-layer-repro
$(BUILD)/run_layer_repro: tests/run_layer_repro.c hooks.h train.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) $< -o $@ $(LDLIBS)
test-run-layer-repro: $(BUILD)/run_layer_repro
	sh tests/run_layer_repro.sh $(abspath $(BUILD)/run_layer_repro) $(BUILD)/run_layer_repro_tmp
