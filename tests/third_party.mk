# tests/third_party.mk - train.h driving an llm.c-style model (late gradient buffer) and an iterator
# data source with its position in checkpoints (tests/test_third_party.c): plain, ASan+UBSan, valgrind.
TP_SRC  := tests/test_third_party.c
TP_BIN  := $(BUILD)/test_third_party
TP_ASAN := $(BUILD)/test_third_party_asan

.PHONY: test-third-party
TEST_TARGETS += test-third-party

$(TP_BIN): $(TP_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -o $@ $(TP_SRC) -lcmocka $(LDLIBS)
$(TP_ASAN): $(TP_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ $(TP_SRC) -lcmocka $(LDLIBS)

test-third-party: $(TP_BIN) $(TP_ASAN)
	./$(TP_BIN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(TP_ASAN)
	$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect ./$(TP_BIN)
