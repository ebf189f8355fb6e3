# tests/sweep.mk - train.h's sweep runner (tr_sweep, Hydra's multirun) and hooks.h's lifecycle events
# (included by the top Makefile).
#
#   make test-sweep-unit       cmocka tests (tests/test_sweep.c): the jobs' order, directories,
#                              hyperparameters and summary, the lifecycle events' order, a failing job,
#                              bad overrides, spec parameters, hooks' signals
#   make test-sweep-asan       the same under ASan + UBSan (leaks checked)
#   make test-sweep-valgrind   the plain build under valgrind
#   make test-sweep-example    examples/sweep.c as a user runs it: a sweep with a failing job (exit 1, the
#                              others done, the summary names it) and a bad override (nothing run)
SW_SRC  := tests/test_sweep.c
SW_BIN  := $(BUILD)/test_sweep
SW_ASAN := $(BUILD)/test_sweep_asan
SW_TMP  := $(BUILD)/sweep_tmp

.PHONY: test-sweep-unit test-sweep-asan test-sweep-valgrind test-sweep-example
TEST_TARGETS += test-sweep-unit test-sweep-asan test-sweep-valgrind test-sweep-example
QUICK_TARGETS += test-sweep-unit test-sweep-asan

$(SW_BIN): $(SW_SRC) tests/test.h hooks.h train.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $(SW_SRC) -lcmocka $(LDLIBS)
$(SW_ASAN): $(SW_SRC) tests/test.h hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ $(SW_SRC) -lcmocka $(LDLIBS)

test-sweep-unit: $(SW_BIN)
	./$(SW_BIN)
test-sweep-asan: $(SW_ASAN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(SW_ASAN)
test-sweep-valgrind: $(SW_BIN)
	$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect ./$(SW_BIN)

test-sweep-example: $(BUILD)/sweep
	@rm -rf $(SW_TMP) && mkdir -p $(SW_TMP)
	@cd $(SW_TMP) && { ../sweep optim.name=adamw,sgdx batch=16,64 early_stopping.patience=2 > out.txt 2>&1; test $$? = 1; } \
	  || { cat $(SW_TMP)/out.txt; echo "sweep-example: a sweep with failing jobs must exit 1"; exit 1; }
	@grep -q '^4 jobs: 2 ok, 2 failed, 0 skipped; summary in multirun/version_0$$' $(SW_TMP)/out.txt \
	  || { cat $(SW_TMP)/out.txt; echo "sweep-example: not 2 ok and 2 failed"; exit 1; }
	@grep -q "^2,failed,sgdx,16,2,,,,optim.name 'sgdx': expected adamw or sgd$$" $(SW_TMP)/multirun/version_0/summary.csv \
	  || { cat $(SW_TMP)/multirun/version_0/summary.csv; echo "sweep-example: the summary lacks the failed job"; exit 1; }
	@for j in 0 1 2 3; do test -f $(SW_TMP)/multirun/version_0/version_$$j/overrides.yaml || exit 1; done
	@test -s $(SW_TMP)/multirun/version_0/summary.svg && test -s $(SW_TMP)/multirun/version_0/version_1/metrics.csv
	@cd $(SW_TMP) && { ../sweep batch=16,sixteen > bad.txt 2>&1; test $$? = 1; } && grep -q "bad value 'sixteen' for 'batch'" bad.txt \
	  && test ! -e multirun/version_1 || { cat $(SW_TMP)/bad.txt; echo "sweep-example: a bad override must be refused before any job"; exit 1; }
	@echo "sweep-example: failing jobs reported, the sweep went on, a bad override refused"
