# tests/predwriter.mk - the prediction_writer callback (tests/test_predwriter.c):
#   test-predwriter-unit / -asan / -valgrind   cmocka: tr_predict writing csv, jsonl and safetensors at every
#                                              interval, read back bit for bit; a loop of your own; bad outputs; a
#                                              file of yours never replaced; a read-only directory (~1 s each)
#   test-predwriter-python   the real safetensors package (numpy) reads what it wrote equal, csv and jsonl too
#                            (the venv of tests/safetensors.mk, $(ST_VENV), made on first use)
PW_SRC  := tests/test_predwriter.c
PW_BIN  := $(BUILD)/test_predwriter
PW_ASAN := $(BUILD)/test_predwriter_asan
PW_TMP  := $(BUILD)/pw_tmp

.PHONY: test-predwriter test-predwriter-unit test-predwriter-asan test-predwriter-valgrind test-predwriter-python
TEST_TARGETS += test-predwriter
QUICK_TARGETS += test-predwriter-unit test-predwriter-asan

$(PW_BIN): $(PW_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $(PW_SRC) -lcmocka $(LDLIBS)
$(PW_ASAN): $(PW_SRC) hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ $(PW_SRC) -lcmocka $(LDLIBS)

test-predwriter: test-predwriter-unit test-predwriter-asan test-predwriter-valgrind test-predwriter-python
test-predwriter-unit: $(PW_BIN)
	./$(PW_BIN)
test-predwriter-asan: $(PW_ASAN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(PW_ASAN)
test-predwriter-valgrind: $(PW_BIN)
	$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect ./$(PW_BIN)
test-predwriter-python: $(PW_BIN) $(ST_VENV)/.safetensors
	rm -rf $(PW_TMP) && mkdir -p $(PW_TMP)
	./$(PW_BIN) --write $(PW_TMP)
	$(ST_VENV)/bin/python tests/pw_check.py $(PW_TMP)
	rm -rf $(PW_TMP)
