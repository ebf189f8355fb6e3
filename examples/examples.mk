# hooks.h examples (train.h examples live in examples/train_examples.mk).
#   make examples     builds them into $(BUILD)/
#   make hook-tree    prints where every hook fires in a fit, as a tree
HK_EXAMPLES := $(BUILD)/minimal $(BUILD)/hook_tree
EXAMPLES    += $(HK_EXAMPLES)

.PHONY: hook-tree
hook-tree: $(BUILD)/hook_tree
	@$(BUILD)/hook_tree

$(BUILD)/minimal: examples/minimal.c hooks.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS)

$(BUILD)/hook_tree: examples/hook_tree.c hooks.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS)

# make test builds and runs every example, so none of them can rot.
.PHONY: test-examples
test-examples: $(HK_EXAMPLES) train-examples
	@$(BUILD)/minimal > $(BUILD)/minimal.out && grep -q "stopped after epoch" $(BUILD)/minimal.out
	@$(BUILD)/hook_tree > $(BUILD)/hook_tree.out && grep -q "on_train_epoch_end" $(BUILD)/hook_tree.out
	@echo "examples: all build and run"
TEST_TARGETS += test-examples
