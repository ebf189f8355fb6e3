# hooks.h / train.h - every entry point. `make demo` and `make test` install what they need first.
#
#   make demo       train the demo MLP with a few hooks (installs dependencies when missing)
#   make test       the whole suite: unit, order, resume, bad-input, sanitizer, valgrind, compile-matrix,
#                   zero-cost, fuzz-smoke, MPI, logging (tensorboard, tmux), examples; a job per core and one more
#   make test-quick the unit, order, resume, bad-input and sanitizer tests (every cmocka suite, plain and
#                   ASan+UBSan); installs only compilers, libstb-dev and cmocka
#   make test-times time every test target alone, serially, on a fresh build-time/ (scripts/test_times.sh)
#   make bench      side-by-side cost tables (instructions via callgrind, ns via the clock)
#   make bench-compile  compile time (the compiler's CPU time) of hooks.h's and train.h's implementation
#                   TUs (and train.h with sections left out) against stb_image.h's, -O2 and -O3 -march=native,
#                   median of 5 rounds with the spread
#   make examples   build every example into build/
#   make install PREFIX=/usr/local   headers + pkg-config file

CC      ?= cc
PREFIX  ?= /usr/local
BUILD   := build
STB_INC ?= /usr/include
# stb_ds.h elsewhere (a carried copy) is still a system header: its warnings are not ours (-Werror builds)
STB_SYSINC = $(if $(filter /usr/include /usr/include/,$(STB_INC)),,-isystem $(STB_INC))
WARN    := -Wall -Wextra -pedantic -Werror
CFLAGS  ?= -std=c99 -O2 -g
ALL_CFLAGS = $(CFLAGS) $(WARN) -I. -I$(STB_INC)
LDLIBS  := -lm
# The test suites build at -O1 (after CFLAGS, so it wins): train.h's implementation is compiled into every
# suite, and -O2 doubles each compile (11 s plain, 28 s with the sanitizers) for no check the suites make.
# test_train and test_math keep CFLAGS (-O2, the users' build) in their plain builds: optimised code is
# tested there, and -O1's warnings (-Wmaybe-uninitialized) in every plain suite build. The sanitizer builds
# (SAN) are at -O0: every access instrumented, none optimised away, and the compile 12 s instead of 27 s
# (about 20 of them in make test); their runs stay short (test_math's, the longest, 13 s).
TEST_CFLAGS = $(ALL_CFLAGS) -O1
SAN     := -O0 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

.PHONY: all deps deps-quick test test-all test-rest test-rest-all print-test-order test-quick test-quick-all test-times bench bench-all examples demo install clean \
        print-test-targets
all: examples

# Each area's fragment appends its targets to TEST_TARGETS, BENCH_TARGETS and EXAMPLES, and the plain
# and sanitizer runs of its cmocka suites to QUICK_TARGETS.
TEST_TARGETS  :=
QUICK_TARGETS :=
BENCH_TARGETS :=
BENCH_BINS    :=
EXAMPLES      :=

$(BUILD):
	@mkdir -p $(BUILD)

# The one Python venv of the tests (network needed, made on first use): tensorboard (the logging tests read
# back what train.h wrote), safetensors and numpy (test-safetensors-python); the versions the checks were
# made with. MLflow's server has a venv of its own (tests/mlflow.mk): two pip installs of make -j never
# share one. In TEST_FIRST (test-venv), so that pip's waits overlap the compiles.
PY_VENV    := $(BUILD)/venv
PY_VENV_OK := $(PY_VENV)/.tensorboard-safetensors
$(PY_VENV_OK):
	python3 -m venv $(PY_VENV)
	$(PY_VENV)/bin/pip install -q --disable-pip-version-check tensorboard==2.21.0 safetensors==0.8.0 numpy==2.4.6
	touch $@
.PHONY: test-venv
TEST_TARGETS += test-venv
TEST_FIRST   += test-venv
test-venv: $(PY_VENV_OK)

deps:
	@sh scripts/deps.sh
deps-quick:
	@sh scripts/deps.sh quick

# A cmocka suite (tests/test_<file>.c, which includes tests/test.h) as make test runs it: test-<name>-unit (the
# plain build, TEST_CFLAGS), test-<name>-asan (ASan+UBSan, leaks checked) and test-<name>-valgrind (the plain build
# under valgrind): three targets, so that make -j runs them side by side; test-<name> is the three.
# $(eval $(call cmocka_suite,name,file,prerequisites besides the source and tests/test.h,sanitizer build's extra flags,
#   shared: links TEST_IMPL_OBJ / TEST_IMPL_ASAN_OBJ, for a suite that skips fsync and uses nothing static of train.h))
define cmocka_suite
.PHONY: test-$(1) test-$(1)-unit test-$(1)-asan test-$(1)-valgrind
TEST_TARGETS += test-$(1)
QUICK_TARGETS += test-$(1)-unit test-$(1)-asan
$$(BUILD)/test_$(2): tests/test_$(2).c tests/test.h $(3)$(if $(5), $$(TEST_IMPL_OBJ)) | $$(BUILD)
	$$(CC) $$(TEST_CFLAGS)$(if $(5), -DTEST_IMPL_ELSEWHERE) -o $$@ tests/test_$(2).c$(if $(5), $$(TEST_IMPL_OBJ)) -lcmocka $$(LDLIBS)
$$(BUILD)/test_$(2)_asan: tests/test_$(2).c tests/test.h $(3)$(if $(5),$(if $(4),, $$(TEST_IMPL_ASAN_OBJ))) | $$(BUILD)
	$$(CC) $$(ALL_CFLAGS) $$(SAN)$(if $(4), $(4))$(if $(5),$(if $(4),, -DTEST_IMPL_ELSEWHERE)) -o $$@ tests/test_$(2).c$(if $(5),$(if $(4),, $$(TEST_IMPL_ASAN_OBJ))) -lcmocka $$(LDLIBS)
test-$(1): test-$(1)-unit test-$(1)-asan test-$(1)-valgrind
test-$(1)-unit: $$(BUILD)/test_$(2)
	./$$(BUILD)/test_$(2)
test-$(1)-asan: $$(BUILD)/test_$(2)_asan
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$$(BUILD)/test_$(2)_asan
test-$(1)-valgrind: $$(BUILD)/test_$(2)
	$$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect ./$$(BUILD)/test_$(2)
endef
VALGRIND ?= valgrind
# The suites' shared implementation (tests/test_impl.c), plain and with the sanitizers: compiled once instead of
# once per suite (about 100 s of CPU less in make test); the suite's extra sanitizer flags (4th argument) cover
# the implementation too, so such a suite's sanitizer build compiles its own.
TEST_IMPL_OBJ      := $(BUILD)/test_impl.o
TEST_IMPL_ASAN_OBJ := $(BUILD)/test_impl_asan.o
$(TEST_IMPL_OBJ): tests/test_impl.c tests/test.h hooks.h train.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -c -o $@ tests/test_impl.c
$(TEST_IMPL_ASAN_OBJ): tests/test_impl.c tests/test.h hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -c -o $@ tests/test_impl.c

include tests/hooks.mk
include tests/math.mk
include tests/train.mk
include tests/zero_cost/zero_cost.mk
include tests/own_loop.mk
include tests/third_party.mk
include tests/ckpt.mk
include tests/spec.mk
include tests/callbacks.mk
include tests/callbacks_b.mk
include tests/groups.mk
include tests/run.mk
include tests/loop.mk
include tests/run_api.mk
include tests/async.mk
include tests/sweep.mk
include tests/log.mk
include tests/safetensors.mk
include tests/predwriter.mk
include tests/mlflow.mk
include tests/mpi.mk
include tests/watchdog.mk
include tests/multihost.mk
include tests/zero.mk
include tests/slurm.mk
include tests/cuda.mk
include tests/gpu_check.mk
include tests/docs.mk
include bench/bench.mk
include examples/examples.mk
include examples/train_examples.mk
include bench/train_bench.mk
include bench/math_bench.mk
include bench/log.mk
include bench/mpi.mk
include bench/compile.mk
include bench/async.mk
include bench/safetensors.mk
include bench/predwriter.mk
include bench/build.mk

# deps first, then everything else (a fresh machine may lack the compilers and libraries). The targets
# run in parallel, TEST_JOBS at a time (default: one more than the cores, so that a job waiting on a disk,
# a server or a pip download leaves no core idle; TEST_JOBS=1 for one at a time); no two of them write the
# same file, and each one's output is printed whole when it ends.
TEST_JOBS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) + 1 )))
TEST_MAKE  = $(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target
test: deps
	@s=$$(date +%s); $(TEST_MAKE) test-all && echo "make test: all passed in $$(($$(date +%s) - s)) s"
# The longest single recipes go first (test-mpi's mpiruns, test-train-sections' 82 builds one after
# another, the 20 s spec fuzzing), so that no core idles at the end waiting for them. make starts a target's recipe only on a pass over the goal's prerequisites
# after the one that started its builds, and its first pass starts every build of every target in list
# order: on a clean clone the first targets' runs came ~210th of 231 jobs. So the first targets' builds
# (TEST_FIRST_BUILDS: keep it in step with their prerequisites, or they just start later) come before
# anything else's: test-rest starts the other targets, in a sub-make sharing the job slots, only once
# they are built, and the first targets' recipes start on the next pass. So do the files that other
# programs are built from (objects, directories: TEST_EARLY_BUILDS): a program waiting for one is built
# only on make's next pass, after every other program (in a clean clone's make test of 1,207 s, test_math's
# seven builds came at 950-1,015 s, zero-cost's links and callgrind runs at 1,150-1,175 s).
TEST_FIRST += test-mpi test-train-sections test-slurm test-mpi-multihost test-fuzz-spec
TEST_FIRST_BUILDS = $(MPI_DIR)/test_mpi $(MPI_DIR)/test_mpi_plain $(MPI_DIR)/train_mpi $(SLURM_DIR_)/test_slurm $(BUILD)/fuzz_spec
TEST_EARLY_BUILDS = $(REF_F32_OBJ) $(REF_F32_ASAN_OBJ) $(TEST_IMPL_OBJ) $(TEST_IMPL_ASAN_OBJ) $(ZC_BINS) $(CU_DIR)/libfake_nvml.so
TEST_ORDER = $(foreach t,$(TEST_FIRST),$(filter $(t),$(TEST_TARGETS))) $(filter-out $(TEST_FIRST),$(TEST_TARGETS))
test-all: $(foreach t,$(TEST_FIRST),$(filter $(t),$(TEST_TARGETS))) test-rest
test-rest: $(TEST_FIRST_BUILDS) $(TEST_EARLY_BUILDS)
	@$(MAKE) --no-print-directory test-rest-all
test-rest-all: $(filter-out $(TEST_FIRST),$(TEST_TARGETS))
test-quick: deps-quick
	@s=$$(date +%s); $(TEST_MAKE) test-quick-all && echo "make test-quick: all passed in $$(($$(date +%s) - s)) s"
test-quick-all: $(QUICK_TARGETS)
test-times:
	@sh scripts/test_times.sh build-time

bench: deps
	@$(MAKE) --no-print-directory bench-all
bench-all: $(BENCH_TARGETS)

examples: $(EXAMPLES)

print-test-targets:
	@echo $(TEST_TARGETS)
print-test-order:
	@echo $(TEST_ORDER)

install:
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 hooks.h train.h $(DESTDIR)$(PREFIX)/include/
	install -d $(DESTDIR)$(PREFIX)/include/kernels
	install -m 644 kernels/train_cuda.cuh $(DESTDIR)$(PREFIX)/include/kernels/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(shell sed -n 's/^#define HOOKS_VERSION_STRING "\(.*\)"/\1/p' hooks.h)|' \
	    scripts/hooks.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/hooks.pc

clean:
	rm -rf $(BUILD)
