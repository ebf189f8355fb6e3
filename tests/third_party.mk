# tests/third_party.mk - train.h driving an llm.c-style model (late gradient buffer) and an iterator
# data source with its position in checkpoints (tests/test_third_party.c): plain, ASan+UBSan, valgrind.
$(eval $(call cmocka_suite,third-party,third_party,hooks.h train.h,,shared))
