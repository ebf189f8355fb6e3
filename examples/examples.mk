# hooks.h examples (train.h examples live in examples/train_examples.mk).
#   make examples     builds them into $(BUILD)/
#   make hook-tree    prints where every hook fires in a fit, as a tree
HK_EXAMPLES := $(BUILD)/minimal $(BUILD)/hook_tree $(BUILD)/own_loop $(BUILD)/epoch_loop
EXAMPLES    += $(HK_EXAMPLES)

.PHONY: hook-tree
hook-tree: $(BUILD)/hook_tree
	@$(BUILD)/hook_tree

$(BUILD)/minimal: examples/minimal.c hooks.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS)

$(BUILD)/hook_tree: examples/hook_tree.c hooks.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS)

# -Ofast on purpose: the example's NaN guard (nan_guard, nan_at=N) must still fire there.
# tests/own_loop.mk tests it further (resume, Ctrl-C, the log files). Built as a user who compiles only what
# the loop uses would: no trainer, math or sweeps, and only the batteries its spec names.
OWN_LOOP_PICK := -DTRAIN_NO_MATH -DTRAIN_NO_SWEEP -DTRAIN_ONLY_SPECIFIC_BATTERIES -DTRAIN_ENABLE_NAN_GUARD \
  -DTRAIN_ENABLE_GRADIENT_MONITOR -DTRAIN_ENABLE_EARLY_STOPPING -DTRAIN_ENABLE_MODEL_CHECKPOINT -DTRAIN_ENABLE_CSV \
  -DTRAIN_ENABLE_JSONL -DTRAIN_ENABLE_TENSORBOARD -DTRAIN_ENABLE_PROGRESS_BAR -DTRAIN_ENABLE_PROFILER \
  -DTRAIN_ENABLE_THROUGHPUT_MONITOR -DTRAIN_ENABLE_WATCHDOG
$(BUILD)/own_loop: examples/own_loop.c hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -Ofast $(OWN_LOOP_PICK) $< -o $@ $(LDLIBS)
# examples/epoch_loop.c: built plainly (all of train.h), as a first program would be
$(BUILD)/epoch_loop: examples/epoch_loop.c hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS)

# make test builds and runs every example, so none of them can rot.
.PHONY: test-examples
test-examples: $(HK_EXAMPLES) train-examples
	@$(BUILD)/minimal > $(BUILD)/minimal.out && grep -q "stopped after epoch" $(BUILD)/minimal.out
	@$(BUILD)/hook_tree > $(BUILD)/hook_tree.out && grep -q "on_train_epoch_end" $(BUILD)/hook_tree.out
	@rm -rf $(BUILD)/own_loop.d && mkdir -p $(BUILD)/own_loop.d && cd $(BUILD)/own_loop.d && ../own_loop > out 2>&1 && grep -q "early_stopping: patience_exhausted" out
	@cd $(BUILD)/own_loop.d && { ../own_loop nan_at=20 > nan.out 2>&1; test $$? = 2; } && grep -q "on_exception: callback 'nan_guard' failed" nan.out
	@echo "examples: all build and run"
TEST_TARGETS += test-examples
