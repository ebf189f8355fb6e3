# tests/ckpt.mk - checkpoint and state-loading hardening (tests/test_ckpt.c): plain, ASan+UBSan, valgrind.
$(eval $(call cmocka_suite,ckpt,ckpt,hooks.h train.h))
