#!/bin/sh
# tests/epoch_loop.sh BIN DIR [PYTHON] - examples/epoch_loop.c (BIN, an absolute path) run as a user runs it, each
# run in its own directory under DIR:
#   full     to the end (early stopping), exit 0; metrics.csv read back: a training row every 4th step, one
#            validation row per epoch at the epoch's last step (Lightning's numbering), one epoch per row
#   last     4 epochs, then resume from last.ckpt (written at the 4th epoch's end): the full run's end, bit for bit
#   best     4 epochs, then resume from a top-k file (the 3rd epoch's end): the same end again
#   ctrlc    SIGINT at step 70 (in the 6th epoch): exit 130, on_exception says why, that step saved to save_to
#            (interrupted.ckpt); resumed from last.ckpt (the 5th epoch's end) and from interrupted.ckpt (in the
#            middle of the 6th): the full run's end again
#   inval    SIGINT during the validation of epoch 3 (after its last batch, step 48): exit 130, interrupted.ckpt; resumed
#            from it and from last.ckpt (epoch 2's end): the full run's end again (the old loop skipped an epoch here)
#   nan      a NaN loss at step 30: nan_guard fails the run, exit 2
#   auto     resume=auto, killed by SIGKILL at steps 30 (epoch 2) and 65 (epoch 5) and run again until it ends: the
#            full run's end, bit for bit; the first run starts fresh, the others resume the newest checkpoint
# With PYTHON (a python with tensorboard): the full run's event file read back, every scalar equal to metrics.csv.
set -u
bin=$1 dir=$2 py=${3:-}
fail() { echo "epoch_loop.sh: FAILED: $*"; exit 1; }
rm -rf "$dir" && mkdir -p "$dir" || exit 1
run() { d=$dir/$1; shift; mkdir -p "$d" && (cd "$d" && "$bin" "$@" >> out.txt 2>&1); }
weights() { grep '^weights:' "$dir/$1/out.txt" | tail -n 1; }
ended() { grep '^ended at' "$dir/$1/out.txt" | tail -n 1 | sed 's/; logs in .*//'; }   # epoch and step at the end
ck=runs/lightning_logs/version_0/checkpoints

run full || { cat "$dir/full/out.txt"; fail "full: exit $?"; }
grep -q '^early_stopping: patience_exhausted wait_count=3 ' "$dir/full/out.txt" || fail "full: early stopping did not end it"
steps=$(sed -n 's/^ended at epoch [0-9]*, step \([0-9]*\): ok;.*/\1/p' "$dir/full/out.txt")
[ -n "$steps" ] || fail "full: no 'ended' line"

run last max_epochs=4 && run last resume=$ck/last.ckpt || { cat "$dir/last/out.txt"; fail "last: a run failed"; }
grep -q 'Restored all states from the checkpoint at .*last.ckpt: epoch 4, global step 48, batch 0 of the epoch' "$dir/last/out.txt" ||
  fail "last: not resumed at the 5th epoch's start"
[ "$(weights last)" = "$(weights full)" ] || fail "last: not the full run's weights"
run best max_epochs=4 && run best resume=$ck/epoch=2-step=36.ckpt || { cat "$dir/best/out.txt"; fail "best: a run failed"; }
[ "$(weights best)" = "$(weights full)" ] || fail "best: not the full run's weights"

run ctrlc ctrl_c_at=70; rc=$?
[ $rc = 130 ] || { cat "$dir/ctrlc/out.txt"; fail "ctrlc: exit $rc, not 130"; }
grep -q '^on_exception: interrupted (Ctrl-C): stopped after step 71; its state saved to interrupted.ckpt$' "$dir/ctrlc/out.txt" || fail "ctrlc: on_exception did not say why"
grep -q 'stopped after step 71; its state saved to interrupted.ckpt' "$dir/ctrlc/out.txt" || fail "ctrlc: no interrupted.ckpt"
cp -r "$dir/ctrlc" "$dir/ctrlc2"
run ctrlc resume=$ck/last.ckpt || { cat "$dir/ctrlc/out.txt"; fail "ctrlc: the resumed run failed"; }
[ "$(weights ctrlc)" = "$(weights full)" ] || fail "ctrlc: resumed from last.ckpt, not the full run's weights"
run ctrlc2 resume=interrupted.ckpt || { cat "$dir/ctrlc2/out.txt"; fail "ctrlc: the run resumed from interrupted.ckpt failed"; }
grep -q 'Restored all states from the checkpoint at interrupted.ckpt: epoch 5, global step 71, batch 10 of the epoch' "$dir/ctrlc2/out.txt" ||
  fail "ctrlc: interrupted.ckpt is not step 71 in the middle of the 6th epoch"
[ "$(weights ctrlc2)" = "$(weights full)" ] || fail "ctrlc: resumed from interrupted.ckpt, not the full run's weights"

# Ctrl-C during the validation of epoch 3 (after the epoch's last batch, before its end): its checkpoints (save_to's
# interrupted.ckpt, model_checkpoint's last.ckpt of epoch 2's end, on_exception_checkpoint's file beside it) resume to
# the full run's end; the old epoch loop's on_exception.ckpt said "at the end of epoch 4" there, and its resume
# skipped an epoch
run inval ctrl_c_in_val=3; rc=$?
[ $rc = 130 ] || { cat "$dir/inval/out.txt"; fail "inval: exit $rc, not 130"; }
grep -q 'stopped after step 48; its state saved to interrupted.ckpt$' "$dir/inval/out.txt" || { cat "$dir/inval/out.txt"; fail "inval: not stopped after step 48 (epoch 3's last) with interrupted.ckpt"; }
cp -r "$dir/inval" "$dir/inval2"
cp -r "$dir/inval" "$dir/inval3"
run inval resume=interrupted.ckpt || { cat "$dir/inval/out.txt"; fail "inval: the run resumed from interrupted.ckpt failed"; }
grep -q 'Restored all states from the checkpoint at interrupted.ckpt: epoch 3, global step 48, batch 11 of the epoch' "$dir/inval/out.txt" ||
  fail "inval: interrupted.ckpt is not after epoch 3's validation (step 48, its last batch)"
[ "$(weights inval)" = "$(weights full)" ] || fail "inval: resumed from interrupted.ckpt, not the full run's weights"
[ "$(ended inval)" = "$(ended full)" ] || fail "inval: resumed from interrupted.ckpt, $(ended inval), not as the full run"
run inval2 resume=$ck/last.ckpt || { cat "$dir/inval2/out.txt"; fail "inval: the run resumed from last.ckpt failed"; }
[ "$(weights inval2)" = "$(weights full)" ] || fail "inval: resumed from last.ckpt, not the full run's weights"
[ "$(ended inval2)" = "$(ended full)" ] || fail "inval: resumed from last.ckpt, $(ended inval2), not as the full run"
run inval3 resume=$ck/on_exception.ckpt || { cat "$dir/inval3/out.txt"; fail "inval: the run resumed from on_exception.ckpt failed"; }
[ "$(weights inval3)" = "$(weights full)" ] || fail "inval: resumed from on_exception.ckpt, not the full run's weights"
[ "$(ended inval3)" = "$(ended full)" ] || fail "inval: resumed from on_exception.ckpt, $(ended inval3), not as the full run"

run nan nan_at=30; rc=$?
[ $rc = 2 ] || { cat "$dir/nan/out.txt"; fail "nan: exit $rc, not 2"; }
grep -q "^on_exception: callback 'nan_guard' failed in on_before_backward: the training loss is nan" "$dir/nan/out.txt" ||
  fail "nan: nan_guard did not fail the run"

# the same command (resume=auto) killed (SIGKILL, at given steps) and run again until it ends
for k in 30 65 ""; do
  run auto resume=auto ${k:+kill_at=$k}; rc=$?
  [ -n "$k" ] || break
  [ $rc = 137 ] || { cat "$dir/auto/out.txt"; fail "auto: kill_at=$k: exit $rc, not 137 (SIGKILL)"; }
done
[ $rc = 0 ] || { cat "$dir/auto/out.txt"; fail "auto: the last run exited $rc"; }
[ "$(weights auto)" = "$(weights full)" ] || fail "auto: killed twice and resumed, not the full run's weights"
[ "$(ended auto)" = "$(ended full)" ] || fail "auto: killed twice and resumed, $(ended auto), not as the full run"
[ "$(grep -c '^resume auto: no checkpoint of this run was found: a fresh start$' "$dir/auto/out.txt")" = 1 ] || fail "auto: not one fresh start"
grep -q "^resume auto: resuming $ck/[a-z0-9=-]*.ckpt (global step 24;" "$dir/auto/out.txt" || fail "auto: the first resume is not from epoch 1's end (step 24)"
grep -q "^resume auto: resuming $ck/[a-z0-9=-]*.ckpt (global step 60;" "$dir/auto/out.txt" || fail "auto: the second resume is not from epoch 4's end (step 60)"
[ ! -e "$dir/auto/runs/lightning_logs/version_1" ] || fail "auto: a resume opened version_1 instead of continuing version_0"

python3 - "$dir/full/runs/lightning_logs/version_0" "$steps" "$py" <<'PY' || exit 1
import csv, math, subprocess, sys
run, steps, py = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def check(ok, what):
    if not ok:
        print("epoch_loop.sh: FAILED: " + what); sys.exit(1)
rows = list(csv.DictReader(open(run + "/metrics.csv", newline="")))
train = [r for r in rows if r["train/loss"]]
val = [r for r in rows if r["val/loss"]]
check([int(r["step"]) for r in train] == list(range(3, steps, 4)), "training steps %r" % [r["step"] for r in train][:5])
check([(int(r["epoch"]), int(r["step"])) for r in val] == [(e, 12 * e + 11) for e in range(steps // 12)],
      "validation rows (epoch, step) %r" % [(r["epoch"], r["step"]) for r in val][:5])
check(all(int(r["epoch"]) == int(r["step"]) // 12 for r in train), "a training row in the wrong epoch")
check(len(train) + len(val) == len(rows), "a row is neither training nor validation")
if py:
    code = """import csv, math, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0}); acc.Reload()
rows = list(csv.DictReader(open(sys.argv[1] + "/metrics.csv", newline="")))
for tag in ("train/loss", "val/loss"):
    want = [(int(r["step"]), float(r[tag])) for r in rows if r[tag]]
    got = [(e.step, e.value) for e in acc.Scalars(tag)]
    assert [s for s, _ in got] == [s for s, _ in want], tag
    assert all(math.isclose(a, b, rel_tol=1e-6) for (_, a), (_, b) in zip(got, want)), tag
print("tensorboard reads %d scalars" % sum(len(acc.Scalars(t)) for t in acc.Tags()["scalars"]))"""
    out = subprocess.run([py, "-c", code, run], capture_output=True, text=True)
    check(out.returncode == 0, "tensorboard: " + out.stderr[-400:])
    print("epoch_loop.sh: " + out.stdout.strip())
PY
echo "epoch_loop.sh: $steps steps; resumed from last.ckpt, a top-k file and Ctrl-C's interrupted.ckpt (mid-epoch and during an epoch's validation) and by resume=auto after two SIGKILLs to the same bits; NaN through on_exception; the logs read back"
