# tests/own_loop.mk - hooks.h in a hand-written loop (included by the top Makefile).
#
#   make test-own-loop     cmocka tests of the own-loop helpers (tests/test_own_loop.c): hk_flow,
#                          HK_FIRE_FLOW, hk_grad_norm and its cache, the bit-level finite checks;
#                          plain, under ASan+UBSan, and under valgrind
#   make test-ofast-loop   tests/ofast_loop.c at -Ofast, with gcc and clang: the host loop's parameters
#                          are bit-identical with and without sites (nothing registered, and with hooks
#                          that only read), and a NaN guard built on hk_is_finitef still fires

OF_DIR  := $(BUILD)/ofast
OF_CCS  := gcc clang

$(eval $(call cmocka_suite,own-loop,own_loop,hooks.h))
.PHONY: test-ofast-loop
TEST_TARGETS += test-ofast-loop

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
OR_TMP  := $(BUILD)/own_loop_tmp

$(eval $(call cmocka_suite,own-run,own_run,tests/own_run_cluster.h examples/mlp.h hooks.h train.h))
.PHONY: test-own-loop-example test-own-loop-tensorboard
TEST_TARGETS += test-own-loop-example test-own-loop-tensorboard

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
