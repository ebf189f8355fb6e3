# tests/log.mk - train.h's loggers, progress bar and plots (tests/test_log.c and the scripts below).
#   test-log              the cmocka tests: plain, ASan+UBSan, valgrind
#   test-log-tensorboard  a run written by train.h, read back by the real tensorboard package (pip, in
#                         the top Makefile's PY_VENV, made on first use): its Python reader (both CRCs
#                         checked) and `tensorboard --logdir`'s server (the Rust data server) over HTTP;
#                         three fits with tr_run_hparam values as the HParams tab lists them (tests/tb_hparams.py)
#   test-log-bar          the live bar in a real terminal (tmux at 40, 60, 80 and 120 columns, and one
#                         narrowed while training: one bar on screen, no row wrapped, a hook's tr_print
#                         lines above it) and in a pipe (one line per epoch; no carriage return, no
#                         escape code; | head -1: no death by SIGPIPE); loops of their own (a step loop,
#                         llm.c's with a validation at step 0, an epoch loop, a fast one) in a pipe and in
#                         tmux at 80 and 120 columns, every value shown checked (tests/bar_check.py)
#   test-log-crash        kill -9 while logging every step: whole rows, no duplicates
#   test-log-plot         rsvg-convert renders the plots (tr_plot_csv's and the committed demo plot)
#   test-log-mpi          callbacks' verbose lines under mpirun -np 2 and 3 (a TRAIN_MPI build): whole
#                         lines with "[rank: N] ", rank-zero-only ones from rank 0 alone; the progress
#                         bar under mpirun -np 2: lines when mpirun writes to a file, in place in a
#                         terminal (tmux)
LOG_SRC  := tests/test_log.c
LOG_BIN  := $(BUILD)/test_log
LOG_TMP  := $(BUILD)/log_tmp

$(eval $(call cmocka_suite,log,log,hooks.h train.h))
.PHONY: test-log-tensorboard test-log-bar test-log-crash test-log-plot test-log-mpi
TEST_TARGETS += test-log-tensorboard test-log-bar test-log-crash test-log-plot test-log-mpi
$(BUILD)/png_check: tests/png_check.c | $(BUILD)
	$(CC) $(ALL_CFLAGS) -Wno-unused-function -o $@ $< $(LDLIBS)

test-log-tensorboard: $(LOG_BIN) $(PY_VENV_OK)
	rm -rf $(LOG_TMP)/tb && mkdir -p $(LOG_TMP)/tb
	./$(LOG_BIN) --tb $(LOG_TMP)/tb
	$(PY_VENV)/bin/python tests/tb_read.py $(LOG_TMP)/tb/run
	$(PY_VENV)/bin/python tests/tb_serve.py $(LOG_TMP)/tb
	./$(LOG_BIN) --tb-hparams $(LOG_TMP)/tb/hparams
	$(PY_VENV)/bin/python tests/tb_hparams.py $(LOG_TMP)/tb/hparams

test-log-bar: $(LOG_BIN)
	sh tests/log_bar.sh ./$(LOG_BIN) $(LOG_TMP)/bar

test-log-crash: $(LOG_BIN)
	sh tests/log_crash.sh ./$(LOG_BIN) $(LOG_TMP)/crash

test-log-plot: $(LOG_BIN) $(BUILD)/png_check test-log-crash
	./$(LOG_BIN) --plot $(LOG_TMP)/crash/lightning_logs/crash/metrics.csv $(LOG_TMP)/crash/plot.svg
	rsvg-convert -o $(LOG_TMP)/crash/plot.png $(LOG_TMP)/crash/plot.svg
	$(BUILD)/png_check $(LOG_TMP)/crash/plot.png 1f77b4
	rsvg-convert -o $(LOG_TMP)/demo_plot.png docs/logging_demo.svg
	$(BUILD)/png_check $(LOG_TMP)/demo_plot.png 1f77b4 ff7f0e

$(BUILD)/mpi/test_log_mpi: $(LOG_SRC) tests/test.h hooks.h train.h | $(BUILD)
	@mkdir -p $(BUILD)/mpi
	@command -v mpicc >/dev/null || { echo "test-log-mpi: mpicc not found: install openmpi-bin libopenmpi-dev (sh scripts/deps.sh)"; exit 1; }
	mpicc $(TEST_CFLAGS) -DTRAIN_MPI -o $@ $(LOG_SRC) -lcmocka $(LDLIBS)

test-log-mpi: $(BUILD)/mpi/test_log_mpi
	sh tests/log_mpi.sh ./$(BUILD)/mpi/test_log_mpi $(LOG_TMP)/mpi
