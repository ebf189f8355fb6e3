# tests/own_loop.mk - hooks.h in a hand-written loop (included by the top Makefile).
#
#   make test-own-loop     cmocka tests of the own-loop helpers (tests/test_own_loop.c): hk_flow,
#                          HK_FIRE_FLOW, hk_grad_norm and its cache, the bit-level finite checks;
#                          plain, under ASan+UBSan, and under valgrind
#   make test-ofast-loop   tests/ofast_loop.c at -Ofast, with gcc and clang: the host loop's parameters
#                          are bit-identical with and without sites (nothing registered, and with hooks
#                          that only read), and a NaN guard built on hk_is_finitef still fires

OL_SRC  := tests/test_own_loop.c
OL_BIN  := $(BUILD)/test_own_loop
OL_ASAN := $(BUILD)/test_own_loop_asan
OF_DIR  := $(BUILD)/ofast
OF_CCS  := gcc clang

.PHONY: test-own-loop test-own-loop-unit test-own-loop-asan test-own-loop-valgrind test-ofast-loop
TEST_TARGETS += test-own-loop test-ofast-loop
QUICK_TARGETS += test-own-loop-unit test-own-loop-asan

$(OL_BIN): $(OL_SRC) hooks.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -o $@ $(OL_SRC) -lcmocka $(LDLIBS)
$(OL_ASAN): $(OL_SRC) hooks.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ $(OL_SRC) -lcmocka $(LDLIBS)

# plain, ASan+UBSan and valgrind: three targets, so that make -j runs them side by side
test-own-loop: test-own-loop-unit test-own-loop-asan test-own-loop-valgrind
test-own-loop-unit: $(OL_BIN)
	./$(OL_BIN)
test-own-loop-asan: $(OL_ASAN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(OL_ASAN)
test-own-loop-valgrind: $(OL_BIN)
	$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect ./$(OL_BIN)

$(OF_DIR)/%-nosites: tests/ofast_loop.c hooks.h
	@mkdir -p $(OF_DIR)
	$* -std=c99 -Ofast $(WARN) -I. -I$(STB_INC) -DOFAST_SITES=0 -o $@ $< $(LDLIBS)
$(OF_DIR)/%-sites: tests/ofast_loop.c hooks.h
	@mkdir -p $(OF_DIR)
	$* -std=c99 -Ofast $(WARN) -I. -I$(STB_INC) -DOFAST_SITES=1 -o $@ $< $(LDLIBS)

test-ofast-loop: $(foreach c,$(OF_CCS),$(OF_DIR)/$(c)-nosites $(OF_DIR)/$(c)-sites)
	@set -e; for c in $(OF_CCS); do \
	  d=$(OF_DIR)/$$c; $$d-nosites > $$d-nosites.out; $$d-sites plain > $$d-plain.out; $$d-sites hooks > $$d-hooks.out; \
	  cmp -s $$d-nosites.out $$d-plain.out || { echo "ofast-loop ($$c): sites with nothing registered changed the results"; exit 1; }; \
	  cmp -s $$d-nosites.out $$d-hooks.out || { echo "ofast-loop ($$c): reading hooks changed the results"; exit 1; }; \
	  $$d-sites nan; \
	  echo "ofast-loop ($$c -Ofast): $$(wc -l < $$d-nosites.out) values bit-identical with and without sites"; done
