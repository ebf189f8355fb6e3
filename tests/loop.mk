# tests/loop.mk - the loop API of issue 36 (tr_run_begin / tr_run_next / tr_run_update / tr_run_end, TR_VIEWS,
# TR_TENSORS, tr_views; tests/test_loop.c) on a small model of its own in a step loop and an epoch loop: Ctrl-C at
# every point of both shapes resumed from every checkpoint it leaves to the uninterrupted run's bits, each silent
# mistake of the issue's list a clear error, hooks changing the lr / requesting checkpoints, accumulation;
# plain, ASan+UBSan, valgrind.
$(eval $(call cmocka_suite,loop,loop,hooks.h train.h,,shared))
