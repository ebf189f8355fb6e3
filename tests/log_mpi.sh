#!/bin/sh
# tests/log_mpi.sh BIN DIR - callbacks' verbose lines under mpirun (2 and 3 ranks sharing stderr): every
# line whole and "[rank: N] " first; model_checkpoint's lines and those of an early_stopping with
# log_rank_zero_only from rank 0 only; an early_stopping without it on every rank. tr_print from rank 0
# alone, tr_print_all from every rank. The progress bar
# under mpirun: lines in mpirun's file, in place in mpirun's terminal (tmux), rank 0 alone drawing.
set -u
bin=$1 dir=$2
for w in 2 3; do
  rm -rf "$dir" && mkdir -p "$dir"
  env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
      OMPI_MCA_btl_vader_single_copy_mechanism=none \
      timeout 60 ${MPIRUN:-mpirun} --oversubscribe --mca mpi_yield_when_idle 1 -np $w "$bin" --mpi-verbose "$dir/ck" > "$dir/out" 2>&1 \
    || { cat "$dir/out"; echo "log_mpi: mpirun -np $w failed"; exit 1; }
  python3 - "$dir/out" $w <<'PY' || exit 1
import re, sys
lines = open(sys.argv[1]).read().splitlines()
w = int(sys.argv[2])
improved, other, saves = set(), 0, 0
for l in lines:
    m = re.fullmatch(r"\[rank: (\d+)\] (early_stopping|model_checkpoint): (.*)", l)
    assert m and l.count(": ") >= 2 and l.count("early_stopping:") + l.count("model_checkpoint:") == 1, "a torn or unprefixed line: %r" % l
    rank, who, msg = int(m.group(1)), m.group(2), m.group(3)
    if who == "model_checkpoint":
        assert rank == 0, "model_checkpoint spoke on rank %d: %r" % (rank, l); saves += 1
    elif msg.startswith("'other' is not set"):
        assert rank == 0, "log_rank_zero_only early_stopping spoke on rank %d" % rank; other += 1
    elif msg.startswith("Metric val/loss improved"):
        improved.add(rank)
assert improved == set(range(w)), "early_stopping lines from ranks %r, want every one of %d" % (sorted(improved), w)
assert other == 3 and saves >= 3, "rank 0: %d rank-zero-only early_stopping lines (want 3), %d model_checkpoint lines" % (other, saves)
print("log_mpi: %d ranks: %d lines, all whole with [rank: N]; rank-zero-only ones from rank 0 alone" % (w, len(lines)))
PY
done

# tr_print prints on global rank 0 alone (Lightning's print), before any run too (mpirun's rank in the
# environment); tr_print_all on every rank.
rm -rf "$dir" && mkdir -p "$dir"
env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    OMPI_MCA_btl_vader_single_copy_mechanism=none \
    timeout 60 ${MPIRUN:-mpirun} --oversubscribe -np 2 "$bin" --print > "$dir/print.txt" 2> "$dir/print.err" \
  || { cat "$dir/print.err"; echo "log_mpi: mpirun -np 2 --print failed"; exit 1; }
sort "$dir/print.txt" > "$dir/print.sorted"
printf '%s\n' "print: after tr_init" "print: before any run" "print: epoch 0 (rank 0)" "print: epoch 1 (rank 0)" \
  "print_all: epoch 0 (rank 0)" "print_all: epoch 0 (rank 1)" "print_all: epoch 1 (rank 0)" "print_all: epoch 1 (rank 1)" \
  | sort > "$dir/print.want"
cmp -s "$dir/print.sorted" "$dir/print.want" || { diff "$dir/print.want" "$dir/print.sorted"; echo "log_mpi: tr_print not from rank 0 alone, or tr_print_all not from every rank"; exit 1; }
echo "log_mpi: tr_print, mpirun -np 2: rank 0 alone (before any run too); tr_print_all: every rank"

# The progress bar under mpirun (Open MPI gives every rank a pseudo-terminal): rank 0 alone draws, as
# lines when mpirun's output is a file (no carriage return, no escape code), in place when it is a
# terminal (tmux: one bar left, as wide as the terminal less one).
rm -rf "$dir" && mkdir -p "$dir"
env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    OMPI_MCA_btl_vader_single_copy_mechanism=none \
    timeout 60 ${MPIRUN:-mpirun} --oversubscribe -np 2 "$bin" --bar 5 > "$dir/bar.txt" 2> "$dir/bar.err" \
  || { cat "$dir/bar.err"; echo "log_mpi: mpirun -np 2 --bar failed"; exit 1; }
if grep -q "$(printf '\r')" "$dir/bar.txt"; then cat -A "$dir/bar.txt"; echo "log_mpi: a carriage return in mpirun's file"; exit 1; fi
if grep -q "$(printf '\033')" "$dir/bar.txt"; then cat -A "$dir/bar.txt"; echo "log_mpi: an escape code in mpirun's file"; exit 1; fi
for e in 0 1 2; do
  [ "$(grep -c "^Epoch $e: 100%" "$dir/bar.txt")" -eq 1 ] || { cat "$dir/bar.txt"; echo "log_mpi: not one line for epoch $e (rank 0 alone draws)"; exit 1; }
done
[ "$(wc -l < "$dir/bar.txt")" -eq 5 ] || { cat "$dir/bar.txt"; echo "log_mpi: $(wc -l < "$dir/bar.txt") lines in mpirun's file, want 5"; exit 1; }
echo "log_mpi: progress bar, mpirun -np 2 > file: 5 complete lines from rank 0, no carriage return, no escape code"
command -v tmux >/dev/null 2>&1 || { echo "log_mpi: tmux is not installed (scripts/deps.sh installs it)"; exit 1; }
sock="hooks_log_mpi_$$"
TERM=xterm-256color tmux -L "$sock" -f /dev/null new-session -d -x 70 -y 30 "env OMPI_ALLOW_RUN_AS_ROOT=1 \
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none timeout 60 ${MPIRUN:-mpirun} \
--oversubscribe -np 2 '$bin' --bar 100; echo EXIT=\$?; sleep 60" || { echo "log_mpi: tmux did not start"; exit 1; }
i=0
while [ $i -lt 60 ]; do
  sleep 0.5
  tmux -L "$sock" capture-pane -p -J -S - > "$dir/screen.txt" 2>/dev/null || break
  grep -q '^EXIT=' "$dir/screen.txt" && break
  i=$((i + 1))
done
tmux -L "$sock" kill-server 2>/dev/null
grep -q '^EXIT=0' "$dir/screen.txt" || { cat "$dir/screen.txt"; echo "log_mpi: mpirun in tmux did not finish"; exit 1; }
[ "$(grep -c '|' "$dir/screen.txt")" -eq 1 ] || { cat "$dir/screen.txt"; echo "log_mpi: not exactly one bar on the terminal"; exit 1; }
width=$(grep '^Epoch 2: 100%' "$dir/screen.txt" | python3 -c 'import sys; print(len(sys.stdin.buffer.read().decode().rstrip("\n").rstrip()))')
[ "$width" -eq 69 ] || { cat "$dir/screen.txt"; echo "log_mpi: the bar under mpirun is $width wide; the terminal has 70 columns (want 69)"; exit 1; }
echo "log_mpi: progress bar, mpirun -np 2 in a 70-column tmux: in place, one bar left: $(grep '^Epoch' "$dir/screen.txt")"
