#!/bin/sh
# tests/own_loop.sh BIN DIR - examples/own_loop.c (BIN, an absolute path) run as a user runs it, each run
# in its own directory under DIR:
#   full     to the end (early stopping), exit 0; the log files read back: metrics.csv (columns, one row
#            per record, Lightning's step numbering), metrics.jsonl (the same records), hparams.yaml, the
#            tensorboard event file (its framing; tests/own_loop_tb.py reads it with tensorboard)
#   resumed  70 steps, then resume=runs/lightning_logs/version_0/checkpoints/last.ckpt: the same end as
#            full, bit for bit - weights, early_stopping's wait_count and best_score; the resume continues
#            its run: the same version_0 (its logs then hold the full run's records, each step once; a
#            second TensorBoard file), model_checkpoint's top-k goes on there (no "afresh")
#   mid      70 steps, then resume from the top-k file of step 60: the same end again
#   ctrlc    SIGINT at step 45: exit 130, on_exception says why, the logs hold every record until then; its
#            last.ckpt (step 40) resumed: the same end as full
#   nan      a NaN loss at step 45 (the binary is built with -Ofast): nan_guard fails the run, exit 2
#   prof     profile=1: the profiler's table, throughput columns in metrics.csv, the same end as plain
set -u
bin=$1 dir=$2
fail() { echo "own_loop.sh: FAILED: $*"; exit 1; }
rm -rf "$dir" && mkdir -p "$dir" || exit 1
run() { # run NAME ARGS...: BIN in DIR/NAME, its output appended to DIR/NAME/out.txt; the exit status
  d=$dir/$1; shift
  mkdir -p "$d" && (cd "$d" && "$bin" "$@" >> out.txt 2>&1)
}
state() { # the end a run reports, without where its logs and checkpoints went
  sed -n -e '/^ended at step/,$p' "$dir/$1/out.txt" | sed -e 's/; logs in .*//' -e '/^model_checkpoint: /d' | tail -n 3
}
ck=runs/lightning_logs/version_0/checkpoints  # model_checkpoint's default: the run directory's checkpoints/

run full; rc=$?
[ $rc = 0 ] || { cat "$dir/full/out.txt"; fail "full: exit $rc"; }
grep -q '^ended at step [0-9]*: ok; logs in runs/lightning_logs/version_0$' "$dir/full/out.txt" || fail "full: no 'ended' line"
grep -q '^early_stopping: patience_exhausted wait_count=3 ' "$dir/full/out.txt" || fail "full: early stopping did not end it"
steps=$(sed -n 's/^ended at step \([0-9]*\):.*/\1/p' "$dir/full/out.txt")

# profile=1: the profiler's table at the end, throughput metrics in the records, the same end as without
run prof max_steps=30 profile=1 || { cat "$dir/prof/out.txt"; fail "prof: exit $?"; }
grep -q '^profiler: fit, .* 30 training steps' "$dir/prof/out.txt" || fail "prof: no profiler table"
grep -q '^phase  *forward  *30 ' "$dir/prof/out.txt" || fail "prof: no forward phase row"
head -n 1 "$dir/prof/runs/lightning_logs/version_0/metrics.csv" | grep -q 'throughput/samples_per_sec' || fail "prof: no throughput column"
run plain max_steps=30 || fail "plain: a run failed"
[ "$(state prof)" = "$(state plain)" ] || fail "prof: profiling changed the run"

# resume from last.ckpt, from the top-k file of step 60: the uninterrupted run's end, bit for bit
run resumed max_steps=70 || { cat "$dir/resumed/out.txt"; fail "resumed: the first run failed"; }
[ "$(ls "$dir/resumed/$ck")" = "$(printf 'epoch=0-step=40.ckpt\nepoch=0-step=60.ckpt\nlast.ckpt')" ] || fail "resumed: $ck holds $(ls "$dir/resumed/$ck")"
run resumed resume=$ck/last.ckpt || { cat "$dir/resumed/out.txt"; fail "resumed: a run failed"; }
[ "$(state resumed)" = "$(state full)" ] || { state full; state resumed; fail "resumed: not the uninterrupted run's end"; }
[ ! -e "$dir/resumed/runs/lightning_logs/version_1" ] || fail "resumed: the resume opened version_1 instead of continuing version_0"
[ ! -e "$dir/resumed/checkpoints" ] || fail "resumed: a ./checkpoints directory"
! grep -q "afresh" "$dir/resumed/out.txt" || fail "resumed: model_checkpoint's top-k started afresh"
[ "$(grep -c 'logs in runs/lightning_logs/version_0$' "$dir/resumed/out.txt")" = 2 ] || fail "resumed: the second run's logs are not in version_0"
run mid max_steps=70 && run mid resume=$ck/epoch=0-step=60.ckpt || { cat "$dir/mid/out.txt"; fail "mid: a run failed"; }
[ "$(state mid)" = "$(state full)" ] || { state full; state mid; fail "mid: not the uninterrupted run's end"; }

# Ctrl-C and a NaN end through on_exception, with everything logged until then on disk
run ctrlc ctrl_c_at=45; rc=$?
[ $rc = 130 ] || { cat "$dir/ctrlc/out.txt"; fail "ctrlc: exit $rc, not 130"; }
grep -q '^on_exception: interrupted (Ctrl-C): stopped after step 46$' "$dir/ctrlc/out.txt" || fail "ctrlc: on_exception did not say why"
cp -r "$dir/ctrlc" "$dir/ctrlc2"   # the Ctrl-C's last.ckpt (step 40) resumes to the uninterrupted run's end
run ctrlc2 resume=$ck/last.ckpt || { cat "$dir/ctrlc2/out.txt"; fail "ctrlc: the run resumed from last.ckpt failed"; }
[ "$(state ctrlc2)" = "$(state full)" ] || { state full; state ctrlc2; fail "ctrlc: resumed from last.ckpt, not the uninterrupted run's end"; }
run nan nan_at=45; rc=$?
[ $rc = 2 ] || { cat "$dir/nan/out.txt"; fail "nan: exit $rc, not 2"; }
grep -q "^on_exception: callback 'nan_guard' failed in on_before_backward: the training loss is nan" "$dir/nan/out.txt" ||
  fail "nan: nan_guard did not fail the run"

# the progress bar in a pipe: one line per validation, the training line at that step with its metrics (a
# step loop's "epoch"); early stopping ends the run at a validation, whose line is the last
n_val=$((steps / 20))
[ "$(grep -c '^Validation' "$dir/full/out.txt")" = 0 ] || fail "full: a validation line of its own (the training line carries its metrics)"
[ "$(grep -c '^Training: .*, val/loss=[0-9.e-]*\]$' "$dir/full/out.txt")" = $n_val ] || fail "full: not $n_val training lines with a validation's metrics"
[ "$(grep -c '^Training: ' "$dir/full/out.txt")" = $n_val ] || fail "full: not one training line per validation"
for s in 20 $steps; do
  grep -q "^Training: .*| $s/2000 \[.*, val/loss=" "$dir/full/out.txt" || fail "full: no training line at step $s with its validation's metrics"
done

# resume=auto: the run killed (SIGKILL, kill_at=N) at random steps and the same command run again, until it ends:
# the uninterrupted run's end, bit for bit; each run picks the newest checkpoint of the run that loads (a fresh
# start the first time); a corrupt newest file is skipped, said in one line
d=$dir/auto; mkdir -p "$d"; kills=0
for k in $(awk -v s=$$ 'BEGIN { srand(s); for (i = 1; i <= 5; i++) printf "%d ", 150 * i - 149 + int(rand() * 149) }') ""; do
  run auto resume=auto ${k:+kill_at=$k}; rc=$?
  [ -n "$k" ] || break
  [ $rc = 137 ] || { cat "$d/out.txt"; fail "auto: kill_at=$k: exit $rc, not 137 (SIGKILL)"; }
  kills=$((kills + 1))
  [ $kills = 2 ] && printf 'not a checkpoint' > "$d/$ck/epoch=0-step=99999.ckpt" # newer by its name, and by its time
done
[ $rc = 0 ] || { cat "$d/out.txt"; fail "auto: the last run exited $rc"; }
[ "$(state auto)" = "$(state full)" ] || { state full; state auto; fail "auto: killed $kills times and resumed, not the uninterrupted run's end"; }
grep -q '^resume auto: no checkpoint of this run was found: a fresh start$' "$d/out.txt" || fail "auto: the first run did not say it started fresh"
resumes=$(grep -c '^resume auto: resuming runs/lightning_logs/version_0/checkpoints/' "$d/out.txt")
[ "$resumes" = 5 ] || { cat "$d/out.txt"; fail "auto: $resumes resumes, not 5"; }
grep -q "^resume auto: skipped runs/lightning_logs/version_0/checkpoints/epoch=0-step=99999.ckpt: tr_run_load: .* was not written by tr_run_save" "$d/out.txt" ||
  fail "auto: the corrupt file was not skipped with a line"
[ ! -e "$d/runs/lightning_logs/version_1" ] || fail "auto: a resume opened version_1 instead of continuing version_0"
echo "own_loop.sh: resume=auto: killed (SIGKILL) at $kills random steps, $resumes resumes: the uninterrupted run's end, bit for bit"

python3 - "$dir" "$steps" <<'PY' || exit 1
import csv, json, os, re, sys
root, steps = sys.argv[1], int(sys.argv[2])
def check(ok, what):
    if not ok:
        print("own_loop.sh: FAILED: " + what); sys.exit(1)
def read(run, version, end, first=0, tb_files=1):
    d = os.path.join(root, run, "runs/lightning_logs", version)
    rows = list(csv.DictReader(open(os.path.join(d, "metrics.csv"), newline="")))
    lines = open(os.path.join(d, "metrics.jsonl")).read().splitlines()
    cols = open(os.path.join(d, "metrics.csv")).readline().strip().split(",")
    check(cols == ["epoch", "grad_2.0_norm/w", "grad_2.0_norm_total", "grad_exploding", "grad_vanishing", "step",
                   "train/loss", "val/loss"], "%s: columns %r" % (run, cols))
    train = [r for r in rows if r["train/loss"]]
    val = [r for r in rows if r["val/loss"]]
    # Lightning's numbering: the 10th step logs step 9; a validation at step 20 carries step 19
    want = list(range(first + 9, end, 10))
    check([int(r["step"]) for r in train] == want, "%s: training steps %r" % (run, [r["step"] for r in train][:5]))
    check([int(r["step"]) for r in val] == [s for s in want if (s + 1) % 20 == 0], "%s: validation steps %r" % (run, [r["step"] for r in val][:5]))
    check(len(train) + len(val) == len(rows), "%s: a row is neither training nor validation" % run)
    check(all(r["epoch"] == "0" for r in rows), "%s: an epoch other than 0" % run)
    check(all(r["grad_2.0_norm_total"] and r["grad_vanishing"] == "0" and not r["val/loss"] for r in train),
          "%s: a training row without its gradient norms (gradient_monitor follows log_every_n_steps)" % run)
    check(all(not r["train/loss"] and not r["grad_2.0_norm_total"] for r in val), "%s: a stale value in a validation row" % run)
    head = json.loads(lines[0])
    check(head["hparams"]["lr"] == 0.02 and head["hparams"]["batch"] == 32 and "specs" in head["hparams"], "%s: jsonl hparams %r" % (run, head))
    recs = [json.loads(x) for x in lines[1:]]
    check(len(recs) == len(rows), "%s: %d jsonl records, %d csv rows" % (run, len(recs), len(rows)))
    for r, j in zip(rows, recs):
        check(int(r["step"]) == j["step"] and j["stage"] == ("train" if r["train/loss"] else "val"), "%s: jsonl %r vs csv %r" % (run, j, r))
        for k, v in j["metrics"].items():
            check(float(r[k]) == v, "%s: %s at step %d: csv %s, jsonl %r" % (run, k, j["step"], r[k], v))
    yaml = open(os.path.join(d, "hparams.yaml")).read()
    check(re.match(r'batch: 32\ndata: "two clouds"\nfeatures: 8\nlog_every_n_steps: 10\nloop: steps\nlr: 0.02\n'
                   r'max_steps: [0-9]+\noptimizer: AdamW\nspecs:\n- "nan_guard;', yaml),
          "%s: hparams.yaml (the loop's settings, yours and the specs) %r" % (run, yaml[:160]))
    tb = [f for f in os.listdir(d) if f.startswith("events.out.tfevents.")]
    check(len(tb) == tb_files and os.path.getsize(os.path.join(d, sorted(tb)[0])) > 1000, "%s: tensorboard files %r" % (run, tb))
    return rows
full = read("full", "version_0", steps)
resumed = read("resumed", "version_0", steps, tb_files=2)   # the resume continued its run's logs
check(resumed == full, "resumed: the logs of the run and its resume are not the uninterrupted run's")
ctrlc = read("ctrlc", "version_0", 46)   # the Ctrl-C at step 45 ends after step 46: records up to step 39
check(ctrlc == full[:6], "ctrlc: the records until the interrupt differ from the full run's")
print("own_loop.sh: %d steps; resumed three times (once after Ctrl-C) to the same bits; Ctrl-C and NaN through on_exception; %d csv rows = jsonl" % (steps, len(full)))
PY
