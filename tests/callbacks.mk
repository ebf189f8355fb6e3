# tests/callbacks.mk - train.h's standard callbacks (tests/test_callbacks.c): early_stopping,
# model_checkpoint, timer, their factories and exact resume: plain, ASan+UBSan, valgrind. (The test
# uses C99 compound literals; the section itself builds as C++ in test-train-compile.)
CB_SRC  := tests/test_callbacks.c
CB_BIN  := $(BUILD)/test_callbacks
CB_ASAN := $(BUILD)/test_callbacks_asan

.PHONY: test-callbacks
TEST_TARGETS += test-callbacks

$(CB_BIN): $(CB_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -o $@ $(CB_SRC) -lcmocka $(LDLIBS)
# float-cast-overflow: gcc's -fsanitize=undefined leaves it out (test_state_ranges needs it)
$(CB_ASAN): $(CB_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -fsanitize=float-cast-overflow -o $@ $(CB_SRC) -lcmocka $(LDLIBS)

test-callbacks: $(CB_BIN) $(CB_ASAN)
	./$(CB_BIN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(CB_ASAN)
	$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect ./$(CB_BIN)
