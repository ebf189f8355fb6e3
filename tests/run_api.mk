# tests/run_api.mk - the run layer's public API for a loop that fires every event itself (tests/test_run_api.c):
# tr_run_enter / tr_run_leave, tr_run_requests, tr_run_desc.settings, accumulate_grad_batches, save_checkpoint,
# rolled_back, tr_run.epoch_done / validates_next / accumulation, calls out of order; plain, ASan+UBSan, valgrind.
RA_SRC  := tests/test_run_api.c
RA_BIN  := $(BUILD)/test_run_api
RA_ASAN := $(BUILD)/test_run_api_asan

.PHONY: test-run-api test-run-api-unit test-run-api-asan test-run-api-valgrind
TEST_TARGETS += test-run-api
QUICK_TARGETS += test-run-api-unit test-run-api-asan

$(RA_BIN): $(RA_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $(RA_SRC) -lcmocka $(LDLIBS)
$(RA_ASAN): $(RA_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ $(RA_SRC) -lcmocka $(LDLIBS)

# plain, ASan+UBSan and valgrind: three targets, so that make -j runs them side by side
test-run-api: test-run-api-unit test-run-api-asan test-run-api-valgrind
test-run-api-unit: $(RA_BIN)
	./$(RA_BIN)
test-run-api-asan: $(RA_ASAN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(RA_ASAN)
test-run-api-valgrind: $(RA_BIN)
	$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect ./$(RA_BIN)
