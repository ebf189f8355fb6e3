# tests/mlflow.mk - the mlflow logger (train/loggers/mlflow.h; -DTRAIN_MLFLOW, -lcurl).
#   test-mlflow-unit   cmocka tests against a fake server (tests/test_mlflow.c): bad URIs, tags and numbers refused
#                      at construction; the bodies (NaN/Inf as MLflow's strings, 1000 metrics and 100 params a
#                      request); the run id continued by a resume; a server down (queue bounds, one line of what
#                      was dropped) and frozen (timeout_ms); rank 1 silent; and, built without TRAIN_MLFLOW, the
#                      message naming the define and the library
#   test-mlflow-asan   the same under ASan+UBSan (leaks too)
#   test-mlflow        a real `mlflow server` (tests/mlflow.sh, tests/mlflow_check.py): tr_fit and a loop of its
#                      own, finished, failed, Ctrl-C, resumed, and a server stopped mid-run and started again,
#                      read back through MLflow's own client against metrics.csv
#   test-mlflow-venv   $(BUILD)/venv_mlflow: MLflow's tracking server without its UI extras (mlflow-skinny and what
#                      `mlflow server` needs: about 350 MiB, half a minute); in TEST_FIRST so that it overlaps the compiles
MLF_SRC  := tests/test_mlflow.c
MLF_BIN  := $(BUILD)/test_mlflow
MLF_ASAN := $(BUILD)/test_mlflow_asan
MLF_NODEF := $(BUILD)/test_mlflow_nodef
MLF_VENV := $(BUILD)/venv_mlflow
MLF_LIBS := -lcmocka -lcurl -pthread $(LDLIBS)

.PHONY: test-mlflow test-mlflow-unit test-mlflow-asan test-mlflow-venv
TEST_TARGETS += test-mlflow-venv test-mlflow-unit test-mlflow-asan test-mlflow
TEST_FIRST += test-mlflow-venv

$(MLF_BIN): $(MLF_SRC) tests/test.h hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -DTRAIN_MLFLOW -o $@ $(MLF_SRC) $(MLF_LIBS)
$(MLF_ASAN): $(MLF_SRC) tests/test.h hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -O1 -DTRAIN_MLFLOW $(SAN) -o $@ $(MLF_SRC) $(MLF_LIBS)
$(MLF_NODEF): $(MLF_SRC) tests/test.h hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -O0 -o $@ $(MLF_SRC) -lcmocka -pthread $(LDLIBS)

test-mlflow-unit: $(MLF_BIN) $(MLF_NODEF)
	./$(MLF_BIN)
	./$(MLF_NODEF)
test-mlflow-asan: $(MLF_ASAN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(MLF_ASAN)

# made once per build directory; its own venv (the top Makefile's PY_VENV holds TensorBoard: two pip installs of make -j
# never share one)
$(MLF_VENV)/.mlflow:
	python3 -m venv $(MLF_VENV)
	$(MLF_VENV)/bin/pip install -q --disable-pip-version-check mlflow-skinny==3.17.2 flask flask-cors sqlalchemy alembic aiohttp numpy pandas
	touch $@
test-mlflow-venv: $(MLF_VENV)/.mlflow

test-mlflow: $(MLF_BIN) $(MLF_VENV)/.mlflow
	sh tests/mlflow.sh ./$(MLF_BIN) $(MLF_VENV) $(BUILD)/mlflow_tmp
