# tests/run_api.mk - the run layer's public API for a loop that fires every event itself (tests/test_run_api.c):
# tr_run_enter / tr_run_leave, tr_run_requests, tr_run_desc.settings, accumulate_grad_batches, save_checkpoint,
# rolled_back, tr_run.epoch_done / validates_next / accumulation, calls out of order; plain, ASan+UBSan, valgrind.
$(eval $(call cmocka_suite,run-api,run_api,hooks.h train.h,,shared))
