# tests/async.mk - checkpoints written in the background (tests/test_async.c): the same bytes as a
# synchronous save, on_checkpoint_saved once on disk, a second save waiting, a failed background write
# (file size limit, a full tmpfs) reaching the run (model_checkpoint's claim of the name removed), kill -9
# mid-write, Ctrl-C mid-write (the writer blocks signals, EINTR retried); plain, ASan+UBSan, TSan.
ASYNC_SRC  := tests/test_async.c
ASYNC_BIN  := $(BUILD)/test_async
ASYNC_ASAN := $(BUILD)/test_async_asan
ASYNC_TSAN := $(BUILD)/test_async_tsan
TSAN_CC    ?= clang

.PHONY: test-async test-async-unit test-async-asan test-async-tsan
TEST_TARGETS += test-async
QUICK_TARGETS += test-async-unit test-async-asan

$(ASYNC_BIN): $(ASYNC_SRC) tests/test.h hooks.h train.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -pthread -o $@ $(ASYNC_SRC) -lcmocka $(LDLIBS)
$(ASYNC_ASAN): $(ASYNC_SRC) tests/test.h hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -pthread -o $@ $(ASYNC_SRC) -lcmocka $(LDLIBS)
$(ASYNC_TSAN): $(ASYNC_SRC) tests/test.h hooks.h train.h | $(BUILD)
	$(TSAN_CC) $(TEST_CFLAGS) -fsanitize=thread -pthread -o $@ $(ASYNC_SRC) -lcmocka $(LDLIBS)

# three targets, so that make -j runs them side by side
test-async: test-async-unit test-async-asan test-async-tsan
test-async-unit: $(ASYNC_BIN)
	./$(ASYNC_BIN)
test-async-asan: $(ASYNC_ASAN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(ASYNC_ASAN)
test-async-tsan: $(ASYNC_TSAN)
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ./$(ASYNC_TSAN)
