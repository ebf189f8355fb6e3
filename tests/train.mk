# tests/train.mk - tests of train.h (included by the top Makefile; uses CC, BUILD, ALL_CFLAGS, WARN,
# SAN, STB_INC, LDLIBS from there).
#
#   make test-train-unit       cmocka tests (tests/test_train.c): order, optimizers vs float32 (bit for bit) and float64 references,
#                              schedules, clipping, signals, requests, failure path, Ctrl-C,
#                              checkpoints (corruption, mismatch, hook state), exact resume (new processes)
#   make test-train-asan       the same tests built with $(SAN) (ASan + UBSan, leaks checked)
#   make test-train-valgrind   the plain build under valgrind, the resume child processes included
#   make test-train-cxx        the same tests compiled as C++ (g++) and run
#   make test-train-compile    train.h from a user TU without the implementation: gcc/clang C99/C11,
#                              g++/clang++ C++11, C implementation + C++ user, TRAIN_STATIC, HK_DISABLE,
#                              gcc -Wc++-compat (plain, -march=native, TRAIN_STATIC + TRAIN_NO_SIMD,
#                              TRAIN_NO_AVX, TRAIN_CUDA's host side; TRAIN_MPI: test-mpi-compile)
#   make test-train-fastmath   a NaN / inf loss is caught in an -Ofast build (bit-pattern test)
#   make test-fuzz-ckpt        libFuzzer on the checkpoint loader for $(FUZZ_CKPT_RUNS) inputs

TR_TEST_SRC   := tests/test_train.c
TR_TEST_BIN   := $(BUILD)/test_train
TR_TEST_ASAN  := $(BUILD)/test_train_asan
TR_TEST_CXX   := $(BUILD)/test_train_cxx
TR_DEPS       := hooks.h train.h tests/test.h tests/ref_f32.h tests/sched_ref.h
TR_CMOCKA     := -lcmocka
VALGRIND      ?= valgrind
FUZZ_CC       ?= clang
FUZZ_CKPT_RUNS ?= 500000

.PHONY: test-train-unit test-train-asan test-train-valgrind test-train-cxx test-train-compile \
        test-train-fastmath test-fuzz-ckpt
TEST_TARGETS += test-train-unit test-train-asan test-train-valgrind test-train-cxx test-train-compile \
                test-train-fastmath test-fuzz-ckpt
QUICK_TARGETS += test-train-unit test-train-asan

# ---- train.h from train/ ---------------------------------------------------------------------------------
# train.h is generated and committed: edit train/'s parts, then `make train.h` (scripts/amalgamate.py).
# Only that goal regenerates it: a fresh clone's parts may be newer than train.h, and make demo, the
# examples, install and the test builds must then use the committed file, not need python3.
# test-train-h fails when train.h is not what the parts generate, or when the committed train.h is stale
# against the committed parts (a regenerated train.h that git sees as changed while the parts are not).
TRAIN_PARTS := $(sort $(wildcard train/*.h train/*/*.h)) train/train.h.in
ifneq ($(filter train.h,$(MAKECMDGOALS)),)
.PHONY: train.h
train.h:
	python3 scripts/amalgamate.py
endif
.PHONY: test-train-h
TEST_TARGETS += test-train-h
test-train-h:
	@python3 scripts/amalgamate.py --check
	@if git rev-parse --git-dir >/dev/null 2>&1 && git diff --quiet HEAD -- train scripts/amalgamate.py && \
	   ! git diff --quiet HEAD -- train.h; then echo "test-train-h: the committed train.h is stale: run make train.h and commit it"; exit 1; fi
	@echo "test-train-h: train.h is what train/ generates"

# train/'s parts included directly instead of train.h (tests/parts.sh): each on its own, and all together
.PHONY: test-train-parts
TEST_TARGETS += test-train-parts
test-train-parts: $(TRAIN_PARTS) tests/parts.sh tests/test_train_user.c | $(BUILD)
	@sh tests/parts.sh $(BUILD)/parts $(CC) -std=c99 -O0 $(WARN) -I. -I$(STB_INC)

# ---- unit tests ----------------------------------------------------------------------------------------
# The optimizer tests link the plain float32 reference (REF_F32_OBJ, tests/math.mk: -ffp-contract=off).
$(TR_TEST_BIN): $(TR_TEST_SRC) $(TR_DEPS) $(REF_F32_OBJ) | $(BUILD)
	$(CC) $(ALL_CFLAGS) -o $@ $(TR_TEST_SRC) $(REF_F32_OBJ) $(TR_CMOCKA) $(LDLIBS)

$(TR_TEST_ASAN): $(TR_TEST_SRC) $(TR_DEPS) $(REF_F32_ASAN_OBJ) | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ $(TR_TEST_SRC) $(REF_F32_ASAN_OBJ) $(TR_CMOCKA) $(LDLIBS)

$(TR_TEST_CXX): $(TR_TEST_SRC) $(TR_DEPS) $(REF_F32_OBJ) | $(BUILD)
	g++ -std=c++11 -O1 -g $(WARN) -I. -I$(STB_INC) -x c++ -o $@ $(TR_TEST_SRC) -x none $(REF_F32_OBJ) $(TR_CMOCKA) $(LDLIBS)

test-train-unit: $(TR_TEST_BIN)
	./$(TR_TEST_BIN)

test-train-asan: $(TR_TEST_ASAN)
	ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(TR_TEST_ASAN)

# --trace-children: the resume tests re-run the binary in new processes; those run under valgrind too.
test-train-valgrind: $(TR_TEST_BIN)
	$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect \
	  --trace-children=yes ./$(TR_TEST_BIN)

test-train-cxx: $(TR_TEST_CXX)
	./$(TR_TEST_CXX)

# ---- compile matrix --------------------------------------------------------------------------------------
# Each configuration compiles the implementation TU and the user TU, links them and runs the result
# (it checks its own behaviour). A stamp records success.
TR_MX       := $(BUILD)/train-compile
TR_MX_FLAGS  = -O2 $(WARN) -I. -I$(STB_INC)
TR_MX_DEPS  := $(TR_DEPS) tests/test_train_user.c tests/test_train_impl.c
TR_MX_CONFIGS := clang-c11 gxx-cxx11 clangxx-cxx11 c-impl-cxx-user static-gcc static-gxx disable-gcc \
                 cxxcompat-gcc cxxcompat-native-gcc cxxcompat-static-gcc cxxcompat-noavx-gcc cxxcompat-cuda-gcc \
                 no-hooks-impl

# $(call tr_mx,stamp,impl compile,user compile,link driver[,another configuration's impl object, the same compile])
tr_mx = @mkdir -p $(TR_MX) && echo "train-compile: $(notdir $(1:.ok=))" && \
  $(if $(5),,$(2) $(TR_MX_FLAGS) -c -o $(1:.ok=)-impl.o tests/test_train_impl.c && )\
  $(3) $(TR_MX_FLAGS) -c -o $(1:.ok=)-user.o tests/test_train_user.c && \
  $(4) -o $(1:.ok=) $(or $(5),$(1:.ok=)-impl.o) $(1:.ok=)-user.o $(LDLIBS) && \
  $(abspath $(1:.ok=)) $(1:.ok=).ckpt > $(1:.ok=).out && touch $(1)

$(TR_MX)/clang-c11.ok: $(TR_MX_DEPS) | $(BUILD)
	$(call tr_mx,$@,clang -std=c11,clang -std=c11,clang)
$(TR_MX)/gxx-cxx11.ok: $(TR_MX_DEPS) | $(BUILD)
	$(call tr_mx,$@,g++ -std=c++11 -x c++,g++ -std=c++11 -x c++,g++)
$(TR_MX)/clangxx-cxx11.ok: $(TR_MX_DEPS) | $(BUILD)
	$(call tr_mx,$@,clang++ -std=c++11 -x c++,clang++ -std=c++11 -x c++,clang++)
# the implementation TU is cxxcompat-gcc's, gcc C99 (the same compile: 15 s of -O2 once, not twice)
$(TR_MX)/c-impl-cxx-user.ok: $(TR_MX_DEPS) $(TR_MX)/cxxcompat-gcc.ok | $(BUILD)
	$(call tr_mx,$@,gcc -std=c99,g++ -std=c++11 -x c++,g++,$(TR_MX)/cxxcompat-gcc-impl.o)
# TRAIN_STATIC: the user TU has its own static copy of train.h; the other TU only hooks.h's
$(TR_MX)/static-gcc.ok: $(TR_MX_DEPS) | $(BUILD)
	$(call tr_mx,$@,gcc -std=c99 -DTEST_TRAIN_HOOKS_ONLY,gcc -std=c99 -DTEST_TRAIN_STATIC,gcc)
$(TR_MX)/static-gxx.ok: $(TR_MX_DEPS) | $(BUILD)
	$(call tr_mx,$@,g++ -std=c++11 -x c++ -DTEST_TRAIN_HOOKS_ONLY,g++ -std=c++11 -x c++ -DTEST_TRAIN_STATIC,g++)
# TRAIN_IMPLEMENTATION without HOOKS_IMPLEMENTATION (the usual mistake) must not compile, and must say what
# to define (gcc and g++); with TRAIN_HOOKS_ELSEWHERE it compiles (static-gcc above links and runs it)
$(TR_MX)/no-hooks-impl.ok: $(TR_DEPS) | $(BUILD)
	@mkdir -p $(TR_MX) && echo "train-compile: no-hooks-impl"
	@for cc in "gcc -std=c99" "g++ -std=c++11 -x c++"; do \
	  printf '#define TRAIN_IMPLEMENTATION\n#include "train.h"\n' > $(TR_MX)/no-hooks-impl.c; \
	  if $$cc $(TR_MX_FLAGS) -c -o $(TR_MX)/no-hooks-impl.o $(TR_MX)/no-hooks-impl.c 2> $(TR_MX)/no-hooks-impl.err; then \
	    echo "train-compile: $$cc compiled TRAIN_IMPLEMENTATION without HOOKS_IMPLEMENTATION"; exit 1; fi; \
	  grep -q 'error: .*train.h: TRAIN_IMPLEMENTATION needs hooks.h.s implementation: #define HOOKS_IMPLEMENTATION too' \
	    $(TR_MX)/no-hooks-impl.err || { cat $(TR_MX)/no-hooks-impl.err; echo "train-compile: $$cc: no #error naming HOOKS_IMPLEMENTATION"; exit 1; }; \
	  [ "$$(grep -c 'error' $(TR_MX)/no-hooks-impl.err)" -le 2 ] || { cat $(TR_MX)/no-hooks-impl.err; echo "train-compile: $$cc: more errors than the one"; exit 1; }; \
	done; touch $@
# HK_DISABLE: train.h still builds and trains; no hook runs
$(TR_MX)/disable-gcc.ok: $(TR_MX_DEPS) | $(BUILD)
	$(call tr_mx,$@,gcc -std=c99 -DHK_DISABLE,gcc -std=c99 -DHK_DISABLE,gcc)
# gcc -Wc++-compat: no warning from train.h or hooks.h (implementations included) in a C program built
# with it (plain gcc C99 is cxxcompat-gcc: -Wc++-compat only adds warnings), whatever the options: the SIMD paths (-march=native), TRAIN_STATIC with TRAIN_NO_SIMD,
# TRAIN_NO_AVX, and TRAIN_CUDA's host side (compiled only; test-cuda-cpu runs it)
TR_CXXCOMPAT := gcc -std=c99 -Wc++-compat
# cxxcompat-gcc also checks every snprintf for a cut (gcc's level 2, not in -Wall; clang has no such flag):
# a value that could outgrow its buffer gets room or tr__msg's visible "..."
TR_FMT_CHECK := -Wformat-truncation=2 -Wformat-overflow=2
$(TR_MX)/cxxcompat-gcc.ok: $(TR_MX_DEPS) | $(BUILD)
	$(call tr_mx,$@,$(TR_CXXCOMPAT) $(TR_FMT_CHECK),$(TR_CXXCOMPAT) $(TR_FMT_CHECK),gcc)
$(TR_MX)/cxxcompat-native-gcc.ok: $(TR_MX_DEPS) | $(BUILD)
	$(call tr_mx,$@,$(TR_CXXCOMPAT) -march=native,$(TR_CXXCOMPAT) -march=native,gcc)
$(TR_MX)/cxxcompat-static-gcc.ok: $(TR_MX_DEPS) | $(BUILD)
	$(call tr_mx,$@,$(TR_CXXCOMPAT) -DTEST_TRAIN_HOOKS_ONLY,$(TR_CXXCOMPAT) -DTEST_TRAIN_STATIC -DTRAIN_NO_SIMD,gcc)
$(TR_MX)/cxxcompat-noavx-gcc.ok: $(TR_MX_DEPS) | $(BUILD)
	$(call tr_mx,$@,$(TR_CXXCOMPAT) -march=native -DTRAIN_NO_AVX,$(TR_CXXCOMPAT),gcc)
$(TR_MX)/cxxcompat-cuda-gcc.ok: $(TR_MX_DEPS) tests/test_cuda_host.c tests/cuda_host.h kernels/train_cuda.cuh | $(BUILD)
	@mkdir -p $(TR_MX) && echo "train-compile: cxxcompat-cuda-gcc"
	$(TR_CXXCOMPAT) $(TR_MX_FLAGS) -c -o $(@:.ok=).o tests/test_cuda_host.c && touch $@

test-train-compile: $(addprefix $(TR_MX)/,$(addsuffix .ok,$(TR_MX_CONFIGS)))
	@echo "train-compile: $(words $(TR_MX_CONFIGS)) configurations built warning-free and ran"

# ---- -Ofast ----------------------------------------------------------------------------------------------
$(BUILD)/test_train_fastmath: tests/test_train_fastmath.c $(TR_DEPS) | $(BUILD)
	$(CC) -std=c99 -Ofast $(WARN) -I. -I$(STB_INC) -o $@ tests/test_train_fastmath.c $(LDLIBS)

test-train-fastmath: $(BUILD)/test_train_fastmath
	./$(BUILD)/test_train_fastmath

# ---- fuzzing the checkpoint loader ----------------------------------------------------------------------
# A bounded number of inputs (not a time limit), starting from valid checkpoints that the target writes
# itself; a crash leaves $(BUILD)/fuzz-ckpt-crash-* to reproduce with ./$(BUILD)/fuzz_ckpt <file>.
$(eval $(call fuzz_runs,ckpt,FUZZ_CKPT_SEED_DIR,FUZZ_CKPT_RUNS,4096,,$(TR_DEPS)))

# ---- sections left out -----------------------------------------------------------------------------------
# tests/compile_sections.c with every section that can be left out, alone and together (TRAIN_NO_TRAINER,
# TRAIN_NO_MATH, TRAIN_NO_CALLBACKS, TRAIN_NO_LOGGERS, TRAIN_NO_SWEEP), each built warning-free by gcc C99 with -Wc++-compat,
# clang C11 and g++ C++11 at -O0 and run: what is left out is gone (the file reuses its names) and a step loop on
# the run layer works with what is left. -O0: what they are for is the same at any level, and -O1 took
# 2 to 10 times as long (clang 12 s against 1.3 s a build, gcc 8 s against 4 s: 360 s of CPU for the 40 builds,
# the longest target of make test); the -O1 and -O2 warnings on the whole of train.h are the suites' and the
# compile matrix's.
TR_SECTION_SETS := "" "-DTRAIN_NO_TRAINER" "-DTRAIN_NO_MATH" "-DTRAIN_NO_CALLBACKS" "-DTRAIN_NO_LOGGERS" "-DTRAIN_NO_SWEEP" \
  "-DTRAIN_NO_TRAINER -DTRAIN_NO_LOGGERS" "-DTRAIN_NO_TRAINER -DTRAIN_NO_CALLBACKS" \
  "-DTRAIN_NO_CALLBACKS -DTRAIN_NO_LOGGERS" "-DTRAIN_NO_MATH -DTRAIN_NO_CALLBACKS -DTRAIN_NO_LOGGERS -DTRAIN_NO_SWEEP"
TR_SECTION_CCS := "gcc -std=c99 -Wc++-compat" "clang -std=c11" "g++ -std=c++11 -x c++" # (-Wc++-compat: gcc C99's warnings and more)
# Batteries one by one (clang C11 at -O0, where an unused helper or variable still warns; half of gcc's
# compile, and a subset of the code the full builds above check, so what it can add is what is left unused or
# undefined): each left out alone, each alone in (TRAIN_ONLY_SPECIFIC_BATTERIES), none, and the own-loop
# example's set (OWN_LOOP_PICK, examples/examples.mk). The names come from train.h's one list of batteries
# (TR__BATTERIES), so a new one is covered at once.
TR_BATTERIES := $(shell sed -n '/define TR__BATTERIES/,/^$$/s/^  X.[a-z_]*, \([A-Z_]*\), .*/\1/p' train.h)
$(if $(word 19,$(TR_BATTERIES)),,$(error tests/train.mk: found only '$(TR_BATTERIES)' in train.h's TR__BATTERIES))
TR_BATTERY_SETS = $(foreach b,$(TR_BATTERIES),"-DTRAIN_NO_$(b)" "-DTRAIN_ONLY_SPECIFIC_BATTERIES -DTRAIN_ENABLE_$(b)") \
  "-DTRAIN_ONLY_SPECIFIC_BATTERIES" "$(OWN_LOOP_PICK)"
.PHONY: test-train-sections
TEST_TARGETS += test-train-sections
test-train-sections: tests/compile_sections.c $(TR_DEPS) | $(BUILD)
	@mkdir -p $(BUILD)/sections; n=0; for cc in $(TR_SECTION_CCS); do for d in $(TR_SECTION_SETS); do \
	  $$cc -O0 $(WARN) -I. -I$(STB_INC) $$d -o $(BUILD)/sections/t tests/compile_sections.c $(LDLIBS) && \
	  (cd $(BUILD)/sections && ./t > /dev/null) || { echo "train-sections: failed: $$cc $$d"; exit 1; }; n=$$((n + 1)); \
	done; done; for d in $(TR_BATTERY_SETS); do \
	  clang -std=c11 -O0 $(WARN) -I. -I$(STB_INC) $$d -o $(BUILD)/sections/b tests/compile_sections.c $(LDLIBS) && \
	  (cd $(BUILD)/sections && ./b > /dev/null) || { echo "train-sections: failed: clang -std=c11 -O0 $$d"; exit 1; }; n=$$((n + 1)); \
	done; echo "train-sections: $$n builds warning-free and ran"

# make demo on a fresh clone whose train/ is newer than train.h, without python3 (tests/fresh_clone.sh)
.PHONY: test-fresh-clone
TEST_TARGETS += test-fresh-clone
test-fresh-clone: | $(BUILD)
	@sh tests/fresh_clone.sh $(BUILD)/fresh-clone
