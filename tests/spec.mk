# tests/spec.mk - the spec parser's hardening (tests/test_spec.c: plain, ASan+UBSan, valgrind) and its
# positions past 2 GiB (tests/test_spec_big.c: plain -O2 only, ~10 s and ~4.5 GB; skips without the memory).
$(eval $(call cmocka_suite,spec,spec,hooks.h))
.PHONY: test-spec-big
TEST_TARGETS += test-spec-big

$(BUILD)/test_spec_big: tests/test_spec_big.c hooks.h | $(BUILD)
	$(CC) -std=c99 -O2 $(WARN) -I. -I$(STB_INC) -o $@ $< $(LDLIBS)
test-spec-big: $(BUILD)/test_spec_big
	./$(BUILD)/test_spec_big
