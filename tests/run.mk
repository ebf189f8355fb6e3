# tests/run.mk - train.h's run layer in a hand-written loop (tests/test_run.c): loggers sharing one
# version directory, records from the context, flushing without teardown, checkpoints in the loop's
# own format, requests, signals, minimum steps, warnings for settings that never fire, the run's state
# machine (calls out of order refused at the call); plain, ASan+UBSan, valgrind.
$(eval $(call cmocka_suite,run,run,hooks.h train.h,,shared))

# ---- a resume continues its run (tests/test_continue.c) -----------------------------------------------
#   make test-continue              own loop and trainer resumed into their run directory: csv/jsonl equal
#                                   to an uninterrupted run's, top-k and early-stopping counters kept, the
#                                   fallbacks (symlink, gone, held by another resume), Lightning's option;
#                                   plain, ASan+UBSan, valgrind
#   make test-continue-tensorboard  the same runs' event files read by the real tensorboard package
#                                   (tests/tb_continue.py; the top Makefile's PY_VENV): each step once,
#                                   the values of the uninterrupted run
CO_BIN  := $(BUILD)/test_continue
CO_TMP  := $(BUILD)/continue_tmp

$(eval $(call cmocka_suite,continue,continue,hooks.h train.h,,shared))
.PHONY: test-continue-tensorboard
TEST_TARGETS += test-continue-tensorboard
test-continue-tensorboard: $(CO_BIN) $(PY_VENV_OK)
	rm -rf $(CO_TMP) && ./$(CO_BIN) --tb $(abspath $(CO_TMP))
	$(PY_VENV)/bin/python tests/tb_continue.py $(CO_TMP)
