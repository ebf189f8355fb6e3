# tests/callbacks_b.mk - train.h's standard callbacks lr_monitor, gradient_monitor, nan_guard, ema,
# lr_finder, model_summary, accumulation_scheduler (tests/test_callbacks_b.c): plain, ASan+UBSan,
# valgrind, and nan_guard's tests built with -ffast-math (its finite checks must survive it).
CBB_FAST := $(BUILD)/test_callbacks_b_fastmath

$(eval $(call cmocka_suite,callbacks-b,callbacks_b,hooks.h train.h))
.PHONY: test-callbacks-b-fastmath
test-callbacks-b: test-callbacks-b-fastmath
$(CBB_FAST): tests/test_callbacks_b.c tests/test.h hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -ffast-math -DNAN_GUARD_ONLY -o $@ tests/test_callbacks_b.c -lcmocka $(LDLIBS)
test-callbacks-b-fastmath: $(CBB_FAST)
	./$(CBB_FAST)

# Instructions per step with nan_guard and gradient_monitor registered (callgrind, exact; about 10 s): both
# read the gradients once (docs/numbers.md has the numbers).
.PHONY: grad-pass-cost
$(BUILD)/grad_pass_cost: tests/grad_pass_cost.c tests/cost.h hooks.h train.h | $(BUILD)
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
$(BUILD)/device_stats_cost: tests/device_stats_cost.c tests/cost.h hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -o $@ tests/device_stats_cost.c $(LDLIBS)
device-stats-cost: $(BUILD)/device_stats_cost
	./$(BUILD)/device_stats_cost
