# tests/ckpt.mk - checkpoint and state-loading hardening (tests/test_ckpt.c): plain, ASan+UBSan, valgrind.
CK_SRC  := tests/test_ckpt.c
CK_BIN  := $(BUILD)/test_ckpt
CK_ASAN := $(BUILD)/test_ckpt_asan

.PHONY: test-ckpt
TEST_TARGETS += test-ckpt

$(CK_BIN): $(CK_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -o $@ $(CK_SRC) -lcmocka $(LDLIBS)
$(CK_ASAN): $(CK_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ $(CK_SRC) -lcmocka $(LDLIBS)

test-ckpt: $(CK_BIN) $(CK_ASAN)
	./$(CK_BIN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(CK_ASAN)
	$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect ./$(CK_BIN)
