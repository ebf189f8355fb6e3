# tests/math.mk - train.h's per-step math (the sections "PER-STEP MATH"): included by the top Makefile
# before tests/train.mk, whose optimizer tests link the same float32 reference.
#
#   make test-math-unit    every pass bit for bit against tests/ref_f32.c (PyTorch's formulas as plain
#                          float32 C, built with -ffp-contract=off), on sizes around the chunk and
#                          vector edges, with NaN/Inf/denormal/zero inputs; reductions against hooks.h
#   make test-math-omp     the same built with -fopenmp, run with 1, 2, 3 and 7 threads: the same bits
#   make test-math-kernels the same for every kernel this machine can run: the SSE one (TRAIN_NO_AVX),
#                          plain C (TRAIN_NO_SIMD), clang's build, and g++'s
#   make test-math-asan    the plain build with $(SAN)
#   make test-math-ref     make bench-math's reference loops (bench/math_ref.c, built as the bench builds
#                          it) are vectorised: packed SIMD instructions in each loop's object code

REF_F32_FLAGS    = -std=c99 -O2 -g -ffp-contract=off $(WARN)
REF_F32_OBJ      := $(BUILD)/ref_f32.o
REF_F32_ASAN_OBJ := $(BUILD)/ref_f32_asan.o
MATH_DEPS        := tests/test_math.c tests/test.h hooks.h train.h tests/ref_f32.h $(REF_F32_OBJ)
# The suite tests the math and the trainer's step: its seven builds leave out the callbacks, loggers and
# sweeps (half of each compile; test-train-compile and the other suites build all of train.h).
MATH_PICK        := -DTRAIN_NO_CALLBACKS -DTRAIN_NO_LOGGERS -DTRAIN_NO_SWEEP

$(REF_F32_OBJ): tests/ref_f32.c tests/ref_f32.h | $(BUILD)
	$(CC) $(REF_F32_FLAGS) -c -o $@ tests/ref_f32.c
$(REF_F32_ASAN_OBJ): tests/ref_f32.c tests/ref_f32.h | $(BUILD)
	$(CC) $(REF_F32_FLAGS) $(SAN) -c -o $@ tests/ref_f32.c

.PHONY: test-math-unit test-math-omp test-math-kernels test-math-asan test-math-ref
TEST_TARGETS += test-math-unit test-math-omp test-math-kernels test-math-asan test-math-ref
QUICK_TARGETS += test-math-unit test-math-asan

test-math-ref: $(BUILD)/math_ref.o tests/math_ref_check.sh
	@sh tests/math_ref_check.sh $(BUILD)/math_ref.o

$(BUILD)/test_math: $(MATH_DEPS) | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(MATH_PICK) -o $@ tests/test_math.c $(REF_F32_OBJ) -lcmocka $(LDLIBS)
$(BUILD)/test_math_omp: $(MATH_DEPS) | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(MATH_PICK) -fopenmp -o $@ tests/test_math.c $(REF_F32_OBJ) -lcmocka $(LDLIBS)
$(BUILD)/test_math_asan: $(MATH_DEPS) $(REF_F32_ASAN_OBJ) | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(MATH_PICK) $(SAN) -o $@ tests/test_math.c $(REF_F32_ASAN_OBJ) -lcmocka $(LDLIBS)

$(BUILD)/test_math_sse: $(MATH_DEPS) | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(MATH_PICK) -DTRAIN_NO_AVX -o $@ tests/test_math.c $(REF_F32_OBJ) -lcmocka $(LDLIBS)
$(BUILD)/test_math_plain: $(MATH_DEPS) | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(MATH_PICK) -DTRAIN_NO_SIMD -o $@ tests/test_math.c $(REF_F32_OBJ) -lcmocka $(LDLIBS)
$(BUILD)/test_math_clang: $(MATH_DEPS) | $(BUILD)
	clang $(ALL_CFLAGS) $(MATH_PICK) -o $@ tests/test_math.c $(REF_F32_OBJ) -lcmocka $(LDLIBS)
$(BUILD)/test_math_cxx: $(MATH_DEPS) | $(BUILD)
	g++ -std=c++11 -O2 -g $(WARN) $(MATH_PICK) -I. -I$(STB_INC) -x c++ -o $@ tests/test_math.c -x none $(REF_F32_OBJ) -lcmocka $(LDLIBS)

test-math-kernels: $(BUILD)/test_math_sse $(BUILD)/test_math_plain $(BUILD)/test_math_clang $(BUILD)/test_math_cxx
	./$(BUILD)/test_math_sse
	./$(BUILD)/test_math_plain
	./$(BUILD)/test_math_clang
	./$(BUILD)/test_math_cxx

test-math-unit: $(BUILD)/test_math
	./$(BUILD)/test_math
test-math-omp: $(BUILD)/test_math_omp
	./$(BUILD)/test_math_omp
test-math-asan: $(BUILD)/test_math_asan
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(BUILD)/test_math_asan
