# tests/run.mk - train.h's run layer in a hand-written loop (tests/test_run.c): loggers sharing one
# version directory, records from the context, flushing without teardown, checkpoints in the loop's
# own format, requests, signals, minimum steps, warnings for settings that never fire, the run's state
# machine (calls out of order refused at the call); plain, ASan+UBSan, valgrind.
RUN_SRC  := tests/test_run.c
RUN_BIN  := $(BUILD)/test_run
RUN_ASAN := $(BUILD)/test_run_asan

.PHONY: test-run test-run-unit test-run-asan test-run-valgrind
TEST_TARGETS += test-run
QUICK_TARGETS += test-run-unit test-run-asan

$(RUN_BIN): $(RUN_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $(RUN_SRC) -lcmocka $(LDLIBS)
$(RUN_ASAN): $(RUN_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ $(RUN_SRC) -lcmocka $(LDLIBS)

# plain, ASan+UBSan and valgrind: three targets, so that make -j runs them side by side
test-run: test-run-unit test-run-asan test-run-valgrind
test-run-unit: $(RUN_BIN)
	./$(RUN_BIN)
test-run-asan: $(RUN_ASAN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(RUN_ASAN)
test-run-valgrind: $(RUN_BIN)
	$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect ./$(RUN_BIN)

# ---- a resume continues its run (tests/test_continue.c) -----------------------------------------------
#   make test-continue              own loop and trainer resumed into their run directory: csv/jsonl equal
#                                   to an uninterrupted run's, top-k and early-stopping counters kept, the
#                                   fallbacks (symlink, gone, held by another resume), Lightning's option;
#                                   plain, ASan+UBSan, valgrind
#   make test-continue-tensorboard  the same runs' event files read by the real tensorboard package
#                                   (tests/tb_continue.py; the top Makefile's PY_VENV): each step once,
#                                   the values of the uninterrupted run
CO_SRC  := tests/test_continue.c
CO_BIN  := $(BUILD)/test_continue
CO_ASAN := $(BUILD)/test_continue_asan
CO_TMP  := $(BUILD)/continue_tmp

.PHONY: test-continue test-continue-unit test-continue-asan test-continue-valgrind test-continue-tensorboard
TEST_TARGETS += test-continue test-continue-tensorboard
QUICK_TARGETS += test-continue-unit test-continue-asan

$(CO_BIN): $(CO_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $(CO_SRC) -lcmocka $(LDLIBS)
$(CO_ASAN): $(CO_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ $(CO_SRC) -lcmocka $(LDLIBS)

test-continue: test-continue-unit test-continue-asan test-continue-valgrind
test-continue-unit: $(CO_BIN)
	./$(CO_BIN)
test-continue-asan: $(CO_ASAN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(CO_ASAN)
test-continue-valgrind: $(CO_BIN)
	$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect ./$(CO_BIN)
test-continue-tensorboard: $(CO_BIN) $(PY_VENV_OK)
	rm -rf $(CO_TMP) && ./$(CO_BIN) --tb $(abspath $(CO_TMP))
	$(PY_VENV)/bin/python tests/tb_continue.py $(CO_TMP)
