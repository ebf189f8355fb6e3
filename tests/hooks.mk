# tests/hooks.mk - tests of hooks.h (included by the top Makefile; uses CC, BUILD, ALL_CFLAGS, WARN,
# SAN, STB_INC, LDLIBS from there).
#
#   make test-hooks-unit       cmocka unit tests (tests/test_hooks.c), plain build
#   make test-hooks-asan       the same tests built with $(SAN) (ASan + UBSan, leaks checked), once with
#                              $(CC) and once with clang (clang's UBSan also checks pointer arithmetic)
#   make test-hooks-valgrind   the plain build under valgrind (definite/indirect leaks are errors)
#   make test-compile-matrix   hooks.h in two TUs with gcc/clang -std=c99/c11, g++/clang++ -std=c++11,
#                              C/C++ mixed, -DHK_DISABLE, -DHOOKS_STATIC, -DHOOKS_NO_STB_DS_IMPL,
#                              HOOKS_REALLOC/HOOKS_FREE/HOOKS_ASSERT overrides, gcc -Wc++-compat (plain,
#                              HOOKS_STATIC, HK_NO_SIGNALS); each program also runs
#   make test-fuzz-spec        libFuzzer on hk_spec_check/hk_spec_apply for $(FUZZ_SPEC_TIME) seconds
#   make test-readme           docs/reference.md's event and signal tables match the X-macros
#   make readme-table          rewrite those tables in docs/reference.md

HK_TEST_BIN     := $(BUILD)/test_hooks
HK_TEST_ASAN    := $(BUILD)/test_hooks_asan
HK_TEST_ASAN_CL := $(BUILD)/test_hooks_asan_clang
HK_CLANG        ?= clang
HK_TEST_SRC     := tests/test_hooks.c
HK_CMOCKA       := -lcmocka
VALGRIND        ?= valgrind
FUZZ_CC         ?= clang
FUZZ_SPEC_TIME  ?= 20
HK_README_TOOL  := $(BUILD)/check_readme_table

.PHONY: test-hooks-unit test-hooks-asan test-hooks-valgrind test-compile-matrix test-fuzz-spec test-readme readme-table
TEST_TARGETS += test-hooks-unit test-hooks-asan test-hooks-valgrind test-compile-matrix test-fuzz-spec test-readme
QUICK_TARGETS += test-hooks-unit test-hooks-asan

# ---- unit tests -------------------------------------------------------------------------------------
$(HK_TEST_BIN): $(HK_TEST_SRC) tests/test.h hooks.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -o $@ $(HK_TEST_SRC) $(HK_CMOCKA) $(LDLIBS)

$(HK_TEST_ASAN): $(HK_TEST_SRC) tests/test.h hooks.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ $(HK_TEST_SRC) $(HK_CMOCKA) $(LDLIBS)

$(HK_TEST_ASAN_CL): $(HK_TEST_SRC) tests/test.h hooks.h | $(BUILD)
	$(HK_CLANG) $(ALL_CFLAGS) $(SAN) -o $@ $(HK_TEST_SRC) $(HK_CMOCKA) $(LDLIBS)

test-hooks-unit: $(HK_TEST_BIN)
	./$(HK_TEST_BIN)

HK_SAN_ENV := ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
              UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
test-hooks-asan: $(HK_TEST_ASAN) $(HK_TEST_ASAN_CL)
	@rc=0; for t in ./$(HK_TEST_ASAN) ./$(HK_TEST_ASAN_CL); do \
	  echo "== $$t"; $(HK_SAN_ENV) $$t || rc=1; \
	done; exit $$rc

test-hooks-valgrind: $(HK_TEST_BIN)
	$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect \
	  ./$(HK_TEST_BIN)

# ---- compile matrix ---------------------------------------------------------------------------------
# Every configuration builds an implementation TU and a user TU (or one TU), links, and runs the
# result (each program checks its own behaviour and returns nonzero on a mismatch). A stamp file
# records success, so an unchanged configuration is not rebuilt.
HK_MX       := $(BUILD)/compile-matrix
HK_MX_FLAGS  = -O2 $(WARN) -I. -I$(STB_INC)
HK_MX_DEPS  := hooks.h tests/compile_impl.c tests/compile_user.c tests/compile_user.cc tests/compile_static.c tests/compile_alloc.c \
               tests/compile_stbds.c
HK_MX_CONFIGS := gcc-c99 gcc-c11 clang-c99 clang-c11 gxx-cxx11 clangxx-cxx11 c-impl-cxx-user cxx-impl-c-user \
                 disable-gcc disable-clang disable-gxx static-gcc static-clang static-gxx alloc-gcc alloc-clangxx \
                 no-stb-impl-gcc no-stb-impl-clang cxxcompat-gcc cxxcompat-static-gcc nosignals-gcc

# $(call hk_mx_two,stamp,impl compile,user compile,link driver)
hk_mx_two = @mkdir -p $(HK_MX) && echo "compile-matrix: $(notdir $(1:.ok=))" && \
  $(2) $(HK_MX_FLAGS) -c -o $(1:.ok=)-impl.o && \
  $(3) $(HK_MX_FLAGS) -c -o $(1:.ok=)-user.o && \
  $(4) -o $(1:.ok=) $(1:.ok=)-impl.o $(1:.ok=)-user.o $(LDLIBS) && \
  ./$(1:.ok=) && touch $(1)

$(HK_MX)/gcc-c99.ok: $(HK_MX_DEPS) | $(BUILD)
	$(call hk_mx_two,$@,gcc -std=c99 tests/compile_impl.c,gcc -std=c99 tests/compile_user.c,gcc)
$(HK_MX)/gcc-c11.ok: $(HK_MX_DEPS) | $(BUILD)
	$(call hk_mx_two,$@,gcc -std=c11 tests/compile_impl.c,gcc -std=c11 tests/compile_user.c,gcc)
$(HK_MX)/clang-c99.ok: $(HK_MX_DEPS) | $(BUILD)
	$(call hk_mx_two,$@,clang -std=c99 tests/compile_impl.c,clang -std=c99 tests/compile_user.c,clang)
$(HK_MX)/clang-c11.ok: $(HK_MX_DEPS) | $(BUILD)
	$(call hk_mx_two,$@,clang -std=c11 tests/compile_impl.c,clang -std=c11 tests/compile_user.c,clang)
# C++: the implementation itself compiled as C++, and a plain C++11 user TU
$(HK_MX)/gxx-cxx11.ok: $(HK_MX_DEPS) | $(BUILD)
	$(call hk_mx_two,$@,g++ -std=c++11 -x c++ tests/compile_impl.c,g++ -std=c++11 tests/compile_user.cc,g++)
$(HK_MX)/clangxx-cxx11.ok: $(HK_MX_DEPS) | $(BUILD)
	$(call hk_mx_two,$@,clang++ -std=c++11 -x c++ tests/compile_impl.c,clang++ -std=c++11 tests/compile_user.cc,clang++)
# mixed languages: extern "C" must make the two sides link
$(HK_MX)/c-impl-cxx-user.ok: $(HK_MX_DEPS) | $(BUILD)
	$(call hk_mx_two,$@,gcc -std=c99 tests/compile_impl.c,g++ -std=c++11 tests/compile_user.cc,g++)
$(HK_MX)/cxx-impl-c-user.ok: $(HK_MX_DEPS) | $(BUILD)
	$(call hk_mx_two,$@,g++ -std=c++11 -x c++ tests/compile_impl.c,gcc -std=c99 tests/compile_user.c,g++)
# HK_DISABLE: sites compile to nothing, arguments are still type-checked, hooks never run
$(HK_MX)/disable-gcc.ok: $(HK_MX_DEPS) | $(BUILD)
	$(call hk_mx_two,$@,gcc -std=c99 -DHK_DISABLE tests/compile_impl.c,gcc -std=c99 -DHK_DISABLE tests/compile_user.c,gcc)
$(HK_MX)/disable-clang.ok: $(HK_MX_DEPS) | $(BUILD)
	$(call hk_mx_two,$@,clang -std=c11 -DHK_DISABLE tests/compile_impl.c,clang -std=c11 -DHK_DISABLE tests/compile_user.c,clang)
$(HK_MX)/disable-gxx.ok: $(HK_MX_DEPS) | $(BUILD)
	$(call hk_mx_two,$@,g++ -std=c++11 -DHK_DISABLE -x c++ tests/compile_impl.c,g++ -std=c++11 -DHK_DISABLE tests/compile_user.cc,g++)
# HOOKS_STATIC: two TUs, each with its own private (static) copy of the implementation
$(HK_MX)/static-gcc.ok: $(HK_MX_DEPS) | $(BUILD)
	$(call hk_mx_two,$@,gcc -std=c99 tests/compile_static.c,gcc -std=c99 -DCOMPILE_STATIC_SECOND tests/compile_static.c,gcc)
$(HK_MX)/static-clang.ok: $(HK_MX_DEPS) | $(BUILD)
	$(call hk_mx_two,$@,clang -std=c99 tests/compile_static.c,clang -std=c99 -DCOMPILE_STATIC_SECOND tests/compile_static.c,clang)
$(HK_MX)/static-gxx.ok: $(HK_MX_DEPS) | $(BUILD)
	$(call hk_mx_two,$@,g++ -std=c++11 -x c++ tests/compile_static.c,g++ -std=c++11 -x c++ -DCOMPILE_STATIC_SECOND tests/compile_static.c,g++)
# HOOKS_NO_STB_DS_IMPL: the program has its own stb_ds implementation (a third TU)
$(HK_MX)/no-stb-impl-gcc.ok: $(HK_MX_DEPS) | $(BUILD)
	@mkdir -p $(HK_MX) && echo "compile-matrix: no-stb-impl-gcc"
	gcc -std=c99 $(HK_MX_FLAGS) -c -o $(@:.ok=)-stbds.o tests/compile_stbds.c
	$(call hk_mx_two,$@,gcc -std=c99 -DHOOKS_NO_STB_DS_IMPL tests/compile_impl.c,gcc -std=c99 tests/compile_user.c,gcc $(@:.ok=)-stbds.o)
$(HK_MX)/no-stb-impl-clang.ok: $(HK_MX_DEPS) | $(BUILD)
	@mkdir -p $(HK_MX) && echo "compile-matrix: no-stb-impl-clang"
	clang -std=c11 $(HK_MX_FLAGS) -c -o $(@:.ok=)-stbds.o tests/compile_stbds.c
	$(call hk_mx_two,$@,clang -std=c11 -DHOOKS_NO_STB_DS_IMPL tests/compile_impl.c,clang -std=c11 tests/compile_user.c,clang $(@:.ok=)-stbds.o)
# gcc -Wc++-compat: C that is also valid C++ (the implementation included), so that a program built
# with it gets no warning from hooks.h; with HOOKS_STATIC; with HK_NO_SIGNALS (install returns -1)
$(HK_MX)/cxxcompat-gcc.ok: $(HK_MX_DEPS) | $(BUILD)
	$(call hk_mx_two,$@,gcc -std=c99 -Wc++-compat tests/compile_impl.c,gcc -std=c99 -Wc++-compat tests/compile_user.c,gcc)
$(HK_MX)/cxxcompat-static-gcc.ok: $(HK_MX_DEPS) | $(BUILD)
	$(call hk_mx_two,$@,gcc -std=c99 -Wc++-compat tests/compile_static.c,gcc -std=c99 -Wc++-compat -DCOMPILE_STATIC_SECOND tests/compile_static.c,gcc)
$(HK_MX)/nosignals-gcc.ok: $(HK_MX_DEPS) | $(BUILD)
	$(call hk_mx_two,$@,gcc -std=c99 -Wc++-compat -DHK_NO_SIGNALS tests/compile_impl.c,gcc -std=c99 -Wc++-compat -DHK_NO_SIGNALS tests/compile_user.c,gcc)
# HOOKS_REALLOC / HOOKS_FREE / HOOKS_ASSERT overrides (one TU)
$(HK_MX)/alloc-gcc.ok: $(HK_MX_DEPS) | $(BUILD)
	@mkdir -p $(HK_MX) && echo "compile-matrix: alloc-gcc"
	gcc -std=c99 $(HK_MX_FLAGS) -o $(@:.ok=) tests/compile_alloc.c $(LDLIBS) && ./$(@:.ok=) && touch $@
$(HK_MX)/alloc-clangxx.ok: $(HK_MX_DEPS) | $(BUILD)
	@mkdir -p $(HK_MX) && echo "compile-matrix: alloc-clangxx"
	clang++ -std=c++11 $(HK_MX_FLAGS) -x c++ -o $(@:.ok=) tests/compile_alloc.c $(LDLIBS) && ./$(@:.ok=) && touch $@

test-compile-matrix: $(addprefix $(HK_MX)/,$(addsuffix .ok,$(HK_MX_CONFIGS)))
	@echo "compile-matrix: $(words $(HK_MX_CONFIGS)) configurations built warning-free and ran"

comma := ,
# $(call fuzz_runs,NAME,SEED_VAR,RUNS_VAR,MAX_LEN,SANITIZERS,DEPS): $(BUILD)/fuzz_NAME from tests/fuzz_NAME.c (libFuzzer,
# ASan, UBSan and SANITIZERS) and test-fuzz-NAME, $(RUNS_VAR) inputs from the seeds the target writes itself into
# $(BUILD)/fuzz_NAME_corpus (SEED_VAR names that directory, absolute: the target may work elsewhere); a crash leaves
# $(BUILD)/fuzz-NAME-crash-* to reproduce with ./$(BUILD)/fuzz_NAME <file>.
define fuzz_runs
$$(BUILD)/fuzz_$(1): tests/fuzz_$(1).c $(6) | $$(BUILD)
	$$(FUZZ_CC) -std=c99 -g -O1 -fsanitize=fuzzer,address,undefined$(5) -fno-sanitize-recover=all \
	  $$(WARN) -I. -I$$(STB_INC) -o $$@ tests/fuzz_$(1).c $$(LDLIBS)
test-fuzz-$(1): $$(BUILD)/fuzz_$(1)
	@mkdir -p $$(BUILD)/fuzz_$(1)_corpus
	@echo "fuzz_$(1): $$($(3)) inputs (log: $$(BUILD)/fuzz_$(1).log)"
	@$(2)=$$(abspath $$(BUILD))/fuzz_$(1)_corpus ./$$(BUILD)/fuzz_$(1) -runs=$$($(3)) -max_len=$(4) \
	  -timeout=10 -print_final_stats=1 -artifact_prefix=$$(abspath $$(BUILD))/fuzz-$(1)- $$(abspath $$(BUILD))/fuzz_$(1)_corpus \
	  > $$(BUILD)/fuzz_$(1).log 2>&1 \
	  || { tail -n 60 $$(BUILD)/fuzz_$(1).log; echo "fuzz_$(1): FAILED (reproduce: ./$$(BUILD)/fuzz_$(1) $$(BUILD)/fuzz-$(1)-crash-...)"; exit 1; }
	@grep -E "^(Done|stat::number_of_executed_units)" $$(BUILD)/fuzz_$(1).log | tail -n 2
endef

# ---- fuzzing the spec parser --------------------------------------------------------------------------
# New inputs go to $(BUILD)/fuzz_spec_corpus (the seeds in tests/fuzz_corpus stay untouched); a crash
# leaves $(BUILD)/fuzz-crash-* to reproduce with  ./$(BUILD)/fuzz_spec $(BUILD)/fuzz-crash-...
$(BUILD)/fuzz_spec: tests/fuzz_spec.c hooks.h | $(BUILD)
	$(FUZZ_CC) -std=c99 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	  $(WARN) -I. -I$(STB_INC) -o $@ tests/fuzz_spec.c $(LDLIBS)

test-fuzz-spec: $(BUILD)/fuzz_spec
	@mkdir -p $(BUILD)/fuzz_spec_corpus
	@echo "fuzz_spec: $(FUZZ_SPEC_TIME) s (log: $(BUILD)/fuzz_spec.log)"
	@./$(BUILD)/fuzz_spec -max_total_time=$(FUZZ_SPEC_TIME) -max_len=512 -timeout=10 -print_final_stats=1 \
	  -artifact_prefix=$(BUILD)/fuzz- $(BUILD)/fuzz_spec_corpus tests/fuzz_corpus > $(BUILD)/fuzz_spec.log 2>&1 \
	  || { tail -n 60 $(BUILD)/fuzz_spec.log; echo "fuzz_spec: FAILED (reproduce: ./$(BUILD)/fuzz_spec $(BUILD)/fuzz-crash-...)"; exit 1; }
	@grep -E "^(Done|stat::number_of_executed_units|#[0-9]+.*DONE)" $(BUILD)/fuzz_spec.log | tail -n 2

# ---- the event and signal tables (docs/reference.md) ----------------------------------------------------------------------------------------
$(HK_README_TOOL): tests/check_readme_table.c tests/doc_sections.h hooks.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -o $@ tests/check_readme_table.c $(LDLIBS)

test-readme: $(HK_README_TOOL)
	./$(HK_README_TOOL) --check docs/reference.md

readme-table: $(HK_README_TOOL)
	./$(HK_README_TOOL) --write docs/reference.md

# The quick starts of README.md and docs/ compile warning-free and run (they are copied from nowhere else).
test-readme-code:
	@sh tests/readme_code.sh "README.md $(wildcard docs/*.md)" $(BUILD)/readme $(CC) $(ALL_CFLAGS)
TEST_TARGETS += test-readme-code
.PHONY: test-readme-code

# README.md and docs/ link only to files that exist, and nothing (headers included) refers outside the repo.
test-readme-links:
	@sh tests/readme_links.sh
TEST_TARGETS += test-readme-links
.PHONY: test-readme-links

# make install puts the headers and a working pkg-config file under PREFIX (compiled at -O0: the flags, the headers
# and the link are what is checked; -O2 tripled the compile of train.h's implementation for nothing more).
test-install:
	@rm -rf $(BUILD)/inst
	@$(MAKE) --no-print-directory install PREFIX=$(CURDIR)/$(BUILD)/inst >/dev/null
	@printf '#define HOOKS_IMPLEMENTATION\n#define TRAIN_IMPLEMENTATION\n#include <train.h>\nint main(void) { tr_trainer t; return tr_init(&t, NULL) == TR_OK; }\n' > $(BUILD)/inst/use.c
	@$(CC) -std=c99 -O0 $(WARN) $$(PKG_CONFIG_PATH=$(BUILD)/inst/lib/pkgconfig pkg-config --cflags hooks) -I$(STB_INC) \
	    -o $(BUILD)/inst/use $(BUILD)/inst/use.c $$(PKG_CONFIG_PATH=$(BUILD)/inst/lib/pkgconfig pkg-config --libs hooks)
	@$(BUILD)/inst/use && echo "install: headers and hooks.pc work"
	@printf '#include <kernels/train_cuda.cuh>\nint main(void) { return 0; }\n' > $(BUILD)/inst/use_cuda.c
	@$(CC) -std=c99 -O0 $(WARN) $$(PKG_CONFIG_PATH=$(BUILD)/inst/lib/pkgconfig pkg-config --cflags hooks) -I$(STB_INC) \
	    -c -o $(BUILD)/inst/use_cuda.o $(BUILD)/inst/use_cuda.c && echo "install: kernels/train_cuda.cuh's declarations compile from the install"
TEST_TARGETS += test-install
.PHONY: test-install

# The implementation in two files (docs/setup.md "Common build errors"): the link fails, and its first error names
# the mistake (hooks.h's hk__HOOKS_IMPLEMENTATION_defined_in_more_than_one_file), with gcc and clang, for
# hooks.h alone and with train.h's implementation too.
.PHONY: test-double-impl
TEST_TARGETS += test-double-impl
test-double-impl: hooks.h train.h | $(BUILD)
	@mkdir -p $(BUILD)/double_impl && cd $(BUILD)/double_impl && \
	for impl in '#define HOOKS_IMPLEMENTATION' '#define HOOKS_IMPLEMENTATION\n#define TRAIN_IMPLEMENTATION'; do \
	  printf "$$impl"'\n#include "train.h"\nint main(void) { return 0; }\n' > main.c; \
	  printf "$$impl"'\n#include "train.h"\nint other(void) { return 1; }\n' > other.c; \
	  for cc in gcc clang; do \
	    if $$cc -std=c99 -O0 -I$(CURDIR) -I$(STB_INC) main.c other.c -o prog -lm 2> err.txt; then \
	      echo "test-double-impl: $$cc linked two implementations"; exit 1; fi; \
	    grep -m1 -E 'multiple definition|duplicate symbol' err.txt | grep -q hk__HOOKS_IMPLEMENTATION_defined_in_more_than_one_file || \
	      { head -3 err.txt; echo "test-double-impl: $$cc's first link error does not name the doubled implementation"; exit 1; }; \
	  done; \
	done; echo "test-double-impl: two implementations fail to link, the first error naming the mistake (gcc, clang)"

# Every command of the README works from the repository root as written (tests/readme_commands.sh).
test-readme-commands:
	@sh tests/readme_commands.sh $(BUILD)/readme_commands
TEST_TARGETS += test-readme-commands
.PHONY: test-readme-commands

# The README's own loops are the examples' lines (tests/readme_loops.sh), so that neither can drift.
test-readme-loops:
	@sh tests/readme_loops.sh $(BUILD)/readme_loops
TEST_TARGETS += test-readme-loops
.PHONY: test-readme-loops
