# tests/predwriter.mk - the prediction_writer callback (tests/test_predwriter.c):
#   test-predwriter-unit / -asan / -valgrind   cmocka: tr_predict writing csv, jsonl and safetensors at every
#                                              interval, read back bit for bit; a loop of your own; bad outputs; a
#                                              file of yours never replaced; a read-only directory; the float text
#   test-predwriter-python   the real safetensors package (numpy, in the top Makefile's PY_VENV) reads what it wrote
#                            equal; Python's csv and json read the csv and jsonl files equal (~1 s)
PW_BIN := $(BUILD)/test_predwriter
PW_TMP := $(BUILD)/pw_tmp

$(eval $(call cmocka_suite,predwriter,predwriter,hooks.h train.h))
.PHONY: test-predwriter-python
test-predwriter: test-predwriter-python

test-predwriter-python: $(PW_BIN) $(PY_VENV_OK)
	rm -rf $(PW_TMP) && mkdir -p $(PW_TMP)
	./$(PW_BIN) --write $(PW_TMP)
	$(PY_VENV)/bin/python tests/pw_check.py $(PW_TMP)
	rm -rf $(PW_TMP)
