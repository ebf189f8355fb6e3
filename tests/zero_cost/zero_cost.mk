# Zero-cost test: callgrind instruction counts and objdump of one step function (tests/zero_cost/run.sh).
# Always gcc -O2, whatever CC and CFLAGS say: the budgets are stated for that compiler and level.
# (-gdwarf-4: valgrind 3.19 cannot read the DWARF 5 that clang 14 writes; try ZC_CC=clang.)
ZC_CC     ?= gcc
ZC_CFLAGS := -std=c99 -O2 -gdwarf-4 -ffunction-sections $(WARN) -I. -I$(STB_INC)
ZC_DIR    := $(BUILD)/zero_cost
ZC_DEPS   := hooks.h tests/zero_cost/zc.h
ZC_BINS   := $(ZC_DIR)/zc_nosite $(ZC_DIR)/zc_fire $(ZC_DIR)/zc_active $(ZC_DIR)/zc_fire_off $(ZC_DIR)/zc_active_off \
             $(ZC_DIR)/zc_fnptr

.PHONY: test-zero-cost
TEST_TARGETS += test-zero-cost

test-zero-cost: $(ZC_BINS)
	@sh tests/zero_cost/run.sh $(ZC_DIR)

$(ZC_DIR):
	@mkdir -p $(ZC_DIR)

$(ZC_DIR)/cc.txt: | $(ZC_DIR)
	@echo "ZC_CC=$$($(ZC_CC) --version | head -n 1)" > $@

$(ZC_DIR)/zc_main.o: tests/zero_cost/zc_main.c $(ZC_DEPS) | $(ZC_DIR)
	$(ZC_CC) $(ZC_CFLAGS) -c $< -o $@
$(ZC_DIR)/zc_step_nosite.o: tests/zero_cost/zc_step.c $(ZC_DEPS) | $(ZC_DIR)
	$(ZC_CC) $(ZC_CFLAGS) -DZC_SITE=0 -c $< -o $@
$(ZC_DIR)/zc_step_fire.o: tests/zero_cost/zc_step.c $(ZC_DEPS) | $(ZC_DIR)
	$(ZC_CC) $(ZC_CFLAGS) -DZC_SITE=1 -c $< -o $@
$(ZC_DIR)/zc_step_active.o: tests/zero_cost/zc_step.c $(ZC_DEPS) | $(ZC_DIR)
	$(ZC_CC) $(ZC_CFLAGS) -DZC_SITE=2 -c $< -o $@
$(ZC_DIR)/zc_step_fnptr.o: tests/zero_cost/zc_step.c $(ZC_DEPS) | $(ZC_DIR)
	$(ZC_CC) $(ZC_CFLAGS) -DZC_SITE=3 -c $< -o $@
$(ZC_DIR)/zc_step_fire_off.o: tests/zero_cost/zc_step.c $(ZC_DEPS) | $(ZC_DIR)
	$(ZC_CC) $(ZC_CFLAGS) -DZC_SITE=1 -DHK_DISABLE -c $< -o $@
$(ZC_DIR)/zc_step_active_off.o: tests/zero_cost/zc_step.c $(ZC_DEPS) | $(ZC_DIR)
	$(ZC_CC) $(ZC_CFLAGS) -DZC_SITE=2 -DHK_DISABLE -c $< -o $@

$(ZC_DIR)/zc_%: $(ZC_DIR)/zc_step_%.o $(ZC_DIR)/zc_main.o $(ZC_DIR)/cc.txt
	$(ZC_CC) $(ZC_CFLAGS) $< $(ZC_DIR)/zc_main.o -o $@ $(LDLIBS)
