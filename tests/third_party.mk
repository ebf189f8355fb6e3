# tests/third_party.mk - train.h driving an llm.c-style model (late gradient buffer) and an iterator
# data source with its position in checkpoints (tests/test_third_party.c): plain, ASan+UBSan, valgrind.
TP_SRC  := tests/test_third_party.c
TP_BIN  := $(BUILD)/test_third_party
TP_ASAN := $(BUILD)/test_third_party_asan

.PHONY: test-third-party test-third-party-unit test-third-party-asan test-third-party-valgrind
TEST_TARGETS += test-third-party
QUICK_TARGETS += test-third-party-unit test-third-party-asan

$(TP_BIN): $(TP_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $(TP_SRC) -lcmocka $(LDLIBS)
$(TP_ASAN): $(TP_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ $(TP_SRC) -lcmocka $(LDLIBS)

# plain, ASan+UBSan and valgrind: three targets, so that make -j runs them side by side
test-third-party: test-third-party-unit test-third-party-asan test-third-party-valgrind
test-third-party-unit: $(TP_BIN)
	./$(TP_BIN)
test-third-party-asan: $(TP_ASAN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(TP_ASAN)
test-third-party-valgrind: $(TP_BIN)
	$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect ./$(TP_BIN)
