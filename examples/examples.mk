# hooks.h examples (train.h examples live in examples/train_examples.mk).
#   make examples     builds them into $(BUILD)/
#   make hook-tree    prints where every hook fires in a fit, as a tree
HK_EXAMPLES := $(BUILD)/minimal $(BUILD)/hook_tree $(BUILD)/own_loop
EXAMPLES    += $(HK_EXAMPLES)

.PHONY: hook-tree
hook-tree: $(BUILD)/hook_tree
	@$(BUILD)/hook_tree

$(BUILD)/minimal: examples/minimal.c hooks.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS)

$(BUILD)/hook_tree: examples/hook_tree.c hooks.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS)

# -Ofast on purpose: the example's NaN guard (nan_guard, nan_at=N) must still fire there.
# tests/own_loop.mk tests it further (resume, Ctrl-C, the log files).
$(BUILD)/own_loop: examples/own_loop.c hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -Ofast $< -o $@ $(LDLIBS)

# make test builds and runs every example, so none of them can rot.
.PHONY: test-examples
test-examples: $(HK_EXAMPLES) train-examples
	@$(BUILD)/minimal > $(BUILD)/minimal.out && grep -q "stopped after epoch" $(BUILD)/minimal.out
	@$(BUILD)/hook_tree > $(BUILD)/hook_tree.out && grep -q "on_train_epoch_end" $(BUILD)/hook_tree.out
	@rm -rf $(BUILD)/own_loop.d && mkdir -p $(BUILD)/own_loop.d && cd $(BUILD)/own_loop.d && ../own_loop > out 2>&1 && grep -q "early_stopping: patience_exhausted" out
	@cd $(BUILD)/own_loop.d && { ../own_loop nan_at=20 > nan.out 2>&1; test $$? = 2; } && grep -q "on_exception: callback 'nan_guard' failed" nan.out
	@echo "examples: all build and run"
TEST_TARGETS += test-examples
