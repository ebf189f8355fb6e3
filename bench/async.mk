# bench/async.mk - what a checkpoint costs the step (bench/bench_async.c): a 256 MiB state saved
# synchronously and in the background by a loop of its own and by the trainer, next to a memcpy of the
# same bytes, on the disk under build/ (a real disk: the printout names the file system).
#   make bench-async                  ASYNC_BENCH_MB=1024 make bench-async (a bigger state)
.PHONY: bench-async
BENCH_TARGETS += bench-async
BENCH_BINS += bench_async

$(BUILD)/bench_async: bench/bench_async.c hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -pthread $< -o $@ $(LDLIBS)

bench-async: $(BUILD)/bench_async
	@echo "CC=$(CC) CFLAGS=$(CFLAGS)"
	@$(BUILD)/bench_async $(BUILD)
