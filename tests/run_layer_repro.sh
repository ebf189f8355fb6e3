#!/bin/sh
# tests/run_layer_repro.sh BIN DIR - reproducers of run-layer behaviours a user integrating train.h into an epoch loop of
# their own found (tests/run_layer_repro.c, BIN an absolute path), each run in its own directory under DIR. Each check
# states what the docs lead a user to expect; it failed while the behaviour was as found (now in make test's list).
#   finished  resume from the last.ckpt of a run that reached max_epochs, same limit: tr_fit refuses this before anything
#             runs (docs/trainer.md, "A resume with nothing left to train"); the run layer accepted it, opened a new
#             version_N and early_stopping said "never checked 'val/loss' ... set check_on_train_epoch_end=false";
#             now tr_run_start refuses it, naming tr_run_desc.max_epochs to raise
#   stopped   resume from the last.ckpt of a run that early_stopping ended, same patience: tr_fit refuses, naming the
#             patience to exceed; the run layer trained one more epoch and stopped again; now tr_run_start refuses it
#   unfired   nan_guard (check_loss=true) in a loop that never fires on_before_backward: the README promised "a warning
#             when a callback waits for an event your loop never fires"; nothing was said and a NaN loss went unseen
set -u
bin=$1 dir=$2 failed=0
rm -rf "$dir" && mkdir -p "$dir" || exit 1
bad() { echo "run_layer_repro.sh: FAILED: $*"; failed=1; }
run() { d=$1; shift; (cd "$dir" && "$bin" "$d" "$@" >> "$d.out" 2>&1); }

run finished 1 || bad "finished: the first run failed"
run finished 1 finished/ckpt/last.ckpt && bad "finished: a resume with nothing left to train was accepted (exit 0)"
grep -q "^ended at epoch 0, step 0: tr_run_start: the run that wrote 'finished/ckpt/last.ckpt' finished: .*raise tr_run_desc.max_epochs" \
  "$dir/finished.out" || bad "finished: the refusal does not say what to raise"
[ -d "$dir/finished/runs/lightning_logs/version_1" ] && bad "finished: the refused resume made a version_1 directory"
grep -q "never checked" "$dir/finished.out" && bad "finished: a misleading 'never checked' warning: $(grep 'never checked' "$dir/finished.out")"

run stopped 20 || bad "stopped: the first run failed"
grep -q '^ended at epoch 2, step 16: ok' "$dir/stopped.out" || bad "stopped: early stopping did not end the first run at epoch 2"
run stopped 20 stopped/ckpt/last.ckpt && bad "stopped: resuming an early-stopped run with the same patience was accepted (exit 0)"
grep -q '^ended at epoch 3' "$dir/stopped.out" && bad "stopped: the resumed run trained another epoch past the recorded stop"
grep -q "tr_run_start: the run that wrote 'stopped/ckpt/last.ckpt' stopped early, .*give early_stopping a patience above 1" \
  "$dir/stopped.out" || bad "stopped: the refusal does not name the patience to exceed"

(cd "$dir" && NO_BEFORE_BACKWARD=1 "$bin" unfired 1 > unfired.out 2>&1) || bad "unfired: the run failed"
grep -q on_before_backward "$dir/unfired.out" || bad "unfired: no warning that nan_guard's loss check waits for on_before_backward"

[ $failed = 0 ] && echo "run_layer_repro.sh: ok"
exit $failed
