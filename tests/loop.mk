# tests/loop.mk - the loop API of issue 36 (tr_run_begin / tr_run_next / tr_run_update / tr_run_end, TR_VIEWS,
# TR_TENSORS, tr_views; tests/test_loop.c) on a small model of its own in a step loop and an epoch loop: Ctrl-C at
# every point of both shapes resumed from every checkpoint it leaves to the uninterrupted run's bits, each silent
# mistake of the issue's list a clear error, hooks changing the lr / requesting checkpoints, accumulation;
# plain, ASan+UBSan, valgrind.
LP_SRC  := tests/test_loop.c
LP_BIN  := $(BUILD)/test_loop
LP_ASAN := $(BUILD)/test_loop_asan

.PHONY: test-loop test-loop-unit test-loop-asan test-loop-valgrind
TEST_TARGETS += test-loop
QUICK_TARGETS += test-loop-unit test-loop-asan

$(LP_BIN): $(LP_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $(LP_SRC) -lcmocka $(LDLIBS)
$(LP_ASAN): $(LP_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ $(LP_SRC) -lcmocka $(LDLIBS)

# plain, ASan+UBSan and valgrind: three targets, so that make -j runs them side by side
test-loop: test-loop-unit test-loop-asan test-loop-valgrind
test-loop-unit: $(LP_BIN)
	./$(LP_BIN)
test-loop-asan: $(LP_ASAN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(LP_ASAN)
test-loop-valgrind: $(LP_BIN)
	$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect ./$(LP_BIN)
