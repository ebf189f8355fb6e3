# tests/callbacks_b.mk - train.h's standard callbacks lr_monitor, gradient_monitor, nan_guard, ema,
# lr_finder, model_summary, accumulation_scheduler (tests/test_callbacks_b.c): plain, ASan+UBSan,
# valgrind, and nan_guard's tests built with -ffast-math (its finite checks must survive it).
CBB_SRC  := tests/test_callbacks_b.c
CBB_BIN  := $(BUILD)/test_callbacks_b
CBB_ASAN := $(BUILD)/test_callbacks_b_asan
CBB_FAST := $(BUILD)/test_callbacks_b_fastmath

.PHONY: test-callbacks-b test-callbacks-b-unit test-callbacks-b-asan test-callbacks-b-fastmath test-callbacks-b-valgrind
TEST_TARGETS += test-callbacks-b
QUICK_TARGETS += test-callbacks-b-unit test-callbacks-b-asan

$(CBB_BIN): $(CBB_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $(CBB_SRC) -lcmocka $(LDLIBS)
$(CBB_ASAN): $(CBB_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ $(CBB_SRC) -lcmocka $(LDLIBS)
$(CBB_FAST): $(CBB_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -ffast-math -DNAN_GUARD_ONLY -o $@ $(CBB_SRC) -lcmocka $(LDLIBS)

# plain, ASan+UBSan, -ffast-math and valgrind: four targets, so that make -j runs them side by side
test-callbacks-b: test-callbacks-b-unit test-callbacks-b-asan test-callbacks-b-fastmath test-callbacks-b-valgrind
test-callbacks-b-unit: $(CBB_BIN)
	./$(CBB_BIN)
test-callbacks-b-asan: $(CBB_ASAN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(CBB_ASAN)
test-callbacks-b-fastmath: $(CBB_FAST)
	./$(CBB_FAST)
test-callbacks-b-valgrind: $(CBB_BIN)
	$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect ./$(CBB_BIN)

# Instructions per step with nan_guard and gradient_monitor registered (callgrind, exact; about 10 s): both
# read the gradients once (docs/numbers.md has the numbers).
.PHONY: grad-pass-cost
$(BUILD)/grad_pass_cost: tests/grad_pass_cost.c hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -o $@ tests/grad_pass_cost.c $(LDLIBS)
grad-pass-cost: $(BUILD)/grad_pass_cost
	./$(BUILD)/grad_pass_cost
# The same, as a test (about 10 s): in tr_fit and in a loop of your own (tr_run_begin), nan_guard and
# gradient_monitor together read the gradients once a step (instructions: exact, not a clock).
.PHONY: test-grad-pass
TEST_TARGETS += test-grad-pass
test-grad-pass: $(BUILD)/grad_pass_cost
	@./$(BUILD)/grad_pass_cost > $(BUILD)/grad_pass_cost.txt || { cat $(BUILD)/grad_pass_cost.txt; exit 1; }
	@n=$$(grep -c 'both registered make 1\.0[0-4] passes' $(BUILD)/grad_pass_cost.txt); [ "$$n" = 2 ] || \
	  { cat $(BUILD)/grad_pass_cost.txt; echo "test-grad-pass: nan_guard and gradient_monitor read the gradients more than once a step"; exit 1; }
	@echo "test-grad-pass: one pass over the gradients a step with nan_guard and gradient_monitor, in tr_fit and in a loop of your own"

# device_stats's cost a step (callgrind, exact; about 15 s): not registered, registered and not due, due
# (a reading every step), in a loop of your own and in tr_fit (docs/callbacks.md quotes the numbers).
.PHONY: device-stats-cost
$(BUILD)/device_stats_cost: tests/device_stats_cost.c hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -o $@ tests/device_stats_cost.c $(LDLIBS)
device-stats-cost: $(BUILD)/device_stats_cost
	./$(BUILD)/device_stats_cost
