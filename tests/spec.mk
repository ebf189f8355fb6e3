# tests/spec.mk - the spec parser's hardening (tests/test_spec.c: plain, ASan+UBSan, valgrind) and its
# positions past 2 GiB (tests/test_spec_big.c: plain -O2 only, ~10 s and ~4.5 GB; skips without the memory).
SP_SRC  := tests/test_spec.c
SP_BIN  := $(BUILD)/test_spec
SP_ASAN := $(BUILD)/test_spec_asan

.PHONY: test-spec test-spec-unit test-spec-asan test-spec-valgrind test-spec-big
TEST_TARGETS += test-spec test-spec-big
QUICK_TARGETS += test-spec-unit test-spec-asan

$(SP_BIN): $(SP_SRC) hooks.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $(SP_SRC) -lcmocka $(LDLIBS)
$(SP_ASAN): $(SP_SRC) hooks.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ $(SP_SRC) -lcmocka $(LDLIBS)

# plain, ASan+UBSan and valgrind: three targets, so that make -j runs them side by side
test-spec: test-spec-unit test-spec-asan test-spec-valgrind
test-spec-unit: $(SP_BIN)
	./$(SP_BIN)
test-spec-asan: $(SP_ASAN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(SP_ASAN)
test-spec-valgrind: $(SP_BIN)
	$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect ./$(SP_BIN)

$(BUILD)/test_spec_big: tests/test_spec_big.c hooks.h | $(BUILD)
	$(CC) -std=c99 -O2 $(WARN) -I. -I$(STB_INC) -o $@ $< $(LDLIBS)
test-spec-big: $(BUILD)/test_spec_big
	./$(BUILD)/test_spec_big
