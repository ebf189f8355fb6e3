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
	$(CC) $(ALL_CFLAGS) -o $@ $(RUN_SRC) -lcmocka $(LDLIBS)
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
