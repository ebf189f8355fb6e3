# hooks.h / train.h - every entry point. `make demo` and `make test` install what they need first.
#
#   make demo       train the demo MLP with a few hooks (installs dependencies when missing)
#   make test       unit, order, resume, bad-input, sanitizer, valgrind, compile-matrix, zero-cost, fuzz-smoke
#   make bench      side-by-side cost tables (instructions via callgrind, ns via the clock)
#   make bench-compile  compile time of hooks.h's and train.h's implementation TUs (and train.h with
#                   sections left out) against stb_image.h's, -O2 and -O3 -march=native, median of 5
#   make examples   build every example into build/
#   make install PREFIX=/usr/local   headers + pkg-config file

CC      ?= cc
PREFIX  ?= /usr/local
BUILD   := build
STB_INC ?= /usr/include
WARN    := -Wall -Wextra -pedantic -Werror
CFLAGS  ?= -std=c99 -O2 -g
ALL_CFLAGS = $(CFLAGS) $(WARN) -I. -I$(STB_INC)
LDLIBS  := -lm
SAN     := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

.PHONY: all deps test test-all bench bench-all examples demo install clean
all: examples

# Each area's fragment appends its targets to TEST_TARGETS, BENCH_TARGETS and EXAMPLES.
TEST_TARGETS  :=
BENCH_TARGETS :=
EXAMPLES      :=

$(BUILD):
	@mkdir -p $(BUILD)

deps:
	@sh scripts/deps.sh

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
include tests/run.mk
include tests/log.mk
include tests/mpi.mk
include tests/cuda.mk
include bench/bench.mk
include examples/examples.mk
include examples/train_examples.mk
include bench/train_bench.mk
include bench/math_bench.mk
include bench/log.mk
include bench/mpi.mk
include bench/compile.mk

# deps first, then everything else (a fresh machine may lack the compilers and libraries).
test: deps
	@$(MAKE) --no-print-directory test-all
test-all: $(TEST_TARGETS)
	@echo "make test: all passed"

bench: deps
	@$(MAKE) --no-print-directory bench-all
bench-all: $(BENCH_TARGETS)

examples: $(EXAMPLES)

install:
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 hooks.h train.h $(DESTDIR)$(PREFIX)/include/
	install -d $(DESTDIR)$(PREFIX)/include/kernels
	install -m 644 kernels/train_cuda.cuh $(DESTDIR)$(PREFIX)/include/kernels/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(shell sed -n 's/^#define HOOKS_VERSION_STRING "\(.*\)"/\1/p' hooks.h)|' \
	    scripts/hooks.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/hooks.pc

clean:
	rm -rf $(BUILD)
