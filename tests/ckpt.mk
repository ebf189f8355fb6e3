# tests/ckpt.mk - checkpoint and state-loading hardening (tests/test_ckpt.c): plain, ASan+UBSan, valgrind.
CK_SRC  := tests/test_ckpt.c
CK_BIN  := $(BUILD)/test_ckpt
CK_ASAN := $(BUILD)/test_ckpt_asan

.PHONY: test-ckpt test-ckpt-unit test-ckpt-asan test-ckpt-valgrind
TEST_TARGETS += test-ckpt
QUICK_TARGETS += test-ckpt-unit test-ckpt-asan

$(CK_BIN): $(CK_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $(CK_SRC) -lcmocka $(LDLIBS)
$(CK_ASAN): $(CK_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ $(CK_SRC) -lcmocka $(LDLIBS)

# plain, ASan+UBSan and valgrind: three targets, so that make -j runs them side by side
test-ckpt: test-ckpt-unit test-ckpt-asan test-ckpt-valgrind
test-ckpt-unit: $(CK_BIN)
	./$(CK_BIN)
test-ckpt-asan: $(CK_ASAN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(CK_ASAN)
test-ckpt-valgrind: $(CK_BIN)
	$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect ./$(CK_BIN)
