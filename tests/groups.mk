# tests/groups.mk - parameter groups and fine-tuning (tests/test_groups.c): param_group and finetuning in tr_fit
# and in a loop of your own, against torch's AdamW / SGD with parameter groups (tests/groups_ref.h, made by
# tests/gen_groups_ref.py): plain, ASan+UBSan and valgrind.
GRP_SRC  := tests/test_groups.c
GRP_BIN  := $(BUILD)/test_groups
GRP_ASAN := $(BUILD)/test_groups_asan

.PHONY: test-groups test-groups-unit test-groups-asan test-groups-valgrind
TEST_TARGETS += test-groups
QUICK_TARGETS += test-groups-unit test-groups-asan

$(GRP_BIN): $(GRP_SRC) tests/groups_ref.h hooks.h train.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $(GRP_SRC) -lcmocka $(LDLIBS)
$(GRP_ASAN): $(GRP_SRC) tests/groups_ref.h hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ $(GRP_SRC) -lcmocka $(LDLIBS)

test-groups: test-groups-unit test-groups-asan test-groups-valgrind
test-groups-unit: $(GRP_BIN)
	./$(GRP_BIN)
test-groups-asan: $(GRP_ASAN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$(GRP_ASAN)
test-groups-valgrind: $(GRP_BIN)
	$(VALGRIND) -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect ./$(GRP_BIN)

# Instructions per step of AdamW with parameter groups against the one flat pass (callgrind, exact; about 30 s),
# in tr_fit and in a loop of your own (docs/callbacks.md quotes the numbers).
.PHONY: groups-cost
$(BUILD)/groups_cost: tests/groups_cost.c tests/cost.h hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -o $@ tests/groups_cost.c $(LDLIBS)
groups-cost: $(BUILD)/groups_cost
	./$(BUILD)/groups_cost
