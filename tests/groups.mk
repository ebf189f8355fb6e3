# tests/groups.mk - parameter groups and fine-tuning (tests/test_groups.c): param_group and finetuning in tr_fit
# and in a loop of your own, against torch's AdamW / SGD with parameter groups (tests/groups_ref.h, made by
# tests/gen_groups_ref.py): plain, ASan+UBSan and valgrind.
$(eval $(call cmocka_suite,groups,groups,tests/groups_ref.h hooks.h train.h,,shared))

# Instructions per step of AdamW with parameter groups against the one flat pass (callgrind, exact; about 30 s),
# in tr_fit and in a loop of your own (docs/callbacks.md quotes the numbers).
.PHONY: groups-cost
$(BUILD)/groups_cost: tests/groups_cost.c tests/cost.h hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -o $@ tests/groups_cost.c $(LDLIBS)
groups-cost: $(BUILD)/groups_cost
	./$(BUILD)/groups_cost
