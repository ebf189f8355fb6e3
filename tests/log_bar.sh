#!/bin/sh
# tests/log_bar.sh BIN DIR - the progress bar in a real terminal (tmux) and in a pipe.
#   BIN --bar N: 3 epochs of 4 batches (N ms each) with a validation, a line about 150 characters long,
#   and a hook's tr_print line at each epoch's middle.
#   terminal, at 40, 60, 80 and 120 columns: every snapshot of the screen (wrapped rows joined) shows at
#             most one training bar and one evaluation bar, no row wider than the terminal less one
#             column (tqdm), so nothing wraps; at the end exactly one bar: the last epoch's at 100%, as
#             wide as the terminal less one, whole (at 40 columns without its bracket: the fields, the rate
#             and the times go before the bar shrinks under 10 cells); the hook's lines above it, whole,
#             each once per epoch
#   resize:   120 columns, narrowed to 60 in the first epoch: the same, the last bar 59 wide (the 120-wide
#             line the bar drew before, rewrapped by tmux into two rows, erased). The screen is checked,
#             not the scrollback: tmux's rewrap keeps the cursor's row and may push a row of the old line
#             into the scrollback, where no program can reach it; the hook's lines are looked for in both.
#   pipe:     complete lines only: no carriage return, no escape code; the sanity check once, one line
#             per epoch (with its validation's metrics), the hook's lines, nothing else
#   head -1:  a pipe whose reader exits after the first line: the run is not killed by SIGPIPE (exit 141);
#             it stops through on_exception with the bar's message (or ends, if head was slower than it)
#   loops of their own (BIN --bar-loop SHAPE US, the values it shows known to tests/bar_check.py): a step
#             loop (examples/own_loop.c's shape), llm.c's shape (the single calls, a validation at step 0),
#             an epoch loop with a validation (examples/epoch_loop.c's), and a fast one (epochs shorter than
#             the refresh interval, the time spent after each: checkpoints). In a pipe: one line per
#             validation (a step loop's "epoch": the training line with its metrics) or per epoch, nothing
#             else. In tmux at 80 and 120 columns, a capture every 0.1 s: every value whole and right, the
#             bar at least 10 cells (fields dropped whole instead), the training bar advancing and not stuck
#             at 0%, a validation bar only below the training bar, never left behind (tests/bar_check.py)
set -u
bin=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir"
fail() { echo "log_bar: $*" >&2; exit 1; }

# -- pipe --
"$bin" --bar 5 | cat > "$dir/pipe.txt" || fail "the run in a pipe failed"
if grep -q "$(printf '\r')" "$dir/pipe.txt"; then fail "a carriage return in the pipe output"; fi
if grep -q "$(printf '\033')" "$dir/pipe.txt"; then fail "an escape code in the pipe output"; fi
for e in 0 1 2; do
  [ "$(grep -c "^Epoch $e: " "$dir/pipe.txt")" -eq 1 ] || { cat "$dir/pipe.txt"; fail "not exactly one line for epoch $e in the pipe"; }
  grep -q "^Epoch $e: 100%|.*| 4/4 \[.*loss=.*val/loss=.*val/perplexity=" "$dir/pipe.txt" || fail "epoch $e's line lacks its validation metrics"
done
[ "$(grep -c '^Sanity Checking: 100%' "$dir/pipe.txt")" -eq 1 ] || { cat "$dir/pipe.txt"; fail "the sanity check is not one line"; }
[ "$(wc -l < "$dir/pipe.txt")" -eq 8 ] || { cat "$dir/pipe.txt"; fail "the pipe has $(wc -l < "$dir/pipe.txt") lines, want 8 (sanity, 3 epochs, 3 notes, done)"; }
echo "log_bar: pipe: $(wc -l < "$dir/pipe.txt") complete lines (the sanity check, one per epoch with its validation metrics, the hook's notes), no carriage return, no escape code"

# -- a pipe whose reader exits: prog | head -1 --
{ "$bin" --bar 60 2> "$dir/head.err"; echo $? > "$dir/head.rc"; } | head -1 > "$dir/head.txt"
rc=$(cat "$dir/head.rc")
[ "$rc" -ne 141 ] || fail "| head -1: the run was killed by SIGPIPE (exit 141) when the pipe's reader exited"
[ "$(wc -l < "$dir/head.txt")" -eq 1 ] || fail "| head -1: head printed $(wc -l < "$dir/head.txt") lines"
if [ "$rc" -ne 0 ]; then
  grep -q "'progress_bar' failed in .*: stdout was closed (Broken pipe: its reader exited" "$dir/head.err" || { cat "$dir/head.err"; fail "| head -1: exit $rc without the bar's message"; }
  echo "log_bar: | head -1: exit $rc, not killed: $(cat "$dir/head.err")"
else echo "log_bar: | head -1: the run ended before head exited (exit 0)"; fi

# -- terminal --
command -v tmux >/dev/null 2>&1 || fail "tmux is not installed (scripts/deps.sh installs it)"
export TERM=xterm-256color
# run COLS [RESIZE]: the run in a COLS-wide tmux window (narrowed to RESIZE columns once epoch 0's note shows)
run() {
  cols=$1 resize=${2:-} sock="hooks_log_bar_$$_$1" out="$dir/screen_$1${2:+_$2}.txt"
  tmux -L "$sock" -f /dev/null new-session -d -x "$cols" -y 30 "'$bin' --bar 60; echo EXIT=\$?; sleep 30" || fail "tmux did not start"
  i=0 shots=0
  while [ $i -lt 100 ]; do
    sleep 0.1
    tmux -L "$sock" capture-pane -p -J > "$out" 2>/dev/null || break
    tmux -L "$sock" capture-pane -p -J -S - > "$out.all" 2>/dev/null || break
    if [ -n "$resize" ] && [ "$cols" -ne "$resize" ] && grep -q '^note: epoch 0' "$out"; then
      tmux -L "$sock" resize-window -x "$resize" 2>/dev/null || fail "tmux resize-window failed"; cols=$resize
    fi
    shots=$((shots + 1))
    n_train=$(grep -c '^Epoch [0-9]*: ' "$out")
    n_eval=$(grep -c '^\(Validation\|Sanity Checking\): ' "$out")
    [ "$n_train" -le 1 ] || { cat "$out"; tmux -L "$sock" kill-server; fail "$1 columns: $n_train training bars on the screen"; }
    [ "$n_eval" -le 1 ] || { cat "$out"; tmux -L "$sock" kill-server; fail "$1 columns: $n_eval evaluation bars on the screen"; }
    wide=$(python3 -c 'import sys; print(max([len(l.rstrip()) for l in open(sys.argv[1], encoding="utf-8")] + [0]))' "$out")
    [ -n "$resize" ] || [ "$wide" -lt "$cols" ] || { cat "$out"; tmux -L "$sock" kill-server; fail "$cols columns: a row of $wide characters (wrapped)"; }
    grep -q '^EXIT=' "$out" && break
    i=$((i + 1))
  done
  tmux -L "$sock" kill-server 2>/dev/null
  grep -q '^EXIT=0' "$out" || { cat "$out"; fail "$cols columns: the run in tmux did not finish"; }
  [ "$(grep -c '|' "$out")" -eq 1 ] || { cat "$out"; fail "$cols columns: not exactly one bar left on the screen"; }
  grep -q '^Epoch 2: 100%|.*| 4/4\( \[.*\]\)\{0,1\}$' "$out" || { cat "$out"; fail "$cols columns: the last bar is not epoch 2 at 100%, whole"; }
  for e in 0 1 2; do [ "$(grep -c "^note: epoch $e half done\$" "$out.all")" -eq 1 ] || { cat "$out.all"; fail "$cols columns: the hook's line for epoch $e is not there once, whole"; }; done
  width=$(grep '^Epoch' "$out" | python3 -c 'import sys; print(len(sys.stdin.buffer.read().decode().rstrip("\n").rstrip()))')
  [ "$width" -eq $((cols - 1)) ] || { cat "$out"; fail "the bar is $width characters wide; the terminal has $cols columns (tqdm: $cols - 1)"; }
  echo "log_bar: terminal $1${2:+ -> $2} columns: $shots screenshots, no wrapped row, one bar per kind; at the end: $(grep '^Epoch' "$out")"
}
for c in 40 60 80 120; do run $c; done
run 120 60

# -- loops of their own --
for shape in steps llmc epochs; do
  "$bin" --bar-loop $shape 0 | cat > "$dir/pipe_$shape.txt" || fail "--bar-loop $shape in a pipe failed"
  if grep -q "$(printf '\r\033')" "$dir/pipe_$shape.txt"; then fail "$shape: a carriage return or an escape code in the pipe"; fi
  case $shape in
    steps) want="40 80 120 160 200 240" desc=Training total=240 ;;
    llmc) want="0 40 80 120 160 200 240" desc=Training total=240 ;;
    epochs) want="0 1 2 3 4 5 6 7 8 9 10 11" desc=Epoch total=20 ;;
  esac
  lines=0
  for n in $want; do
    if [ $shape = epochs ]; then pat="^Epoch $n: 100%|.*| 20/20 \[.*, val/loss=.*, val/perplexity=[0-9.]*\]\$"
    else pat="^Training: .*| $n/240 \[.*, val/loss=.*, val/perplexity=[0-9.]*\]\$"; fi
    [ "$(grep -c "$pat" "$dir/pipe_$shape.txt")" -eq 1 ] || { cat "$dir/pipe_$shape.txt"; fail "$shape: not one line at $n with its validation's metrics in the pipe"; }
    lines=$((lines + 1))
  done
  [ "$(wc -l < "$dir/pipe_$shape.txt")" -eq $((lines + 1)) ] || { cat "$dir/pipe_$shape.txt"; fail "$shape: the pipe has $(wc -l < "$dir/pipe_$shape.txt") lines, want $lines and done"; }
  echo "log_bar: $shape in a pipe: $lines lines, one per $( [ $shape = epochs ] && echo epoch || echo validation) with its metrics: $(head -1 "$dir/pipe_$shape.txt")"
done
# run_loop COLS SHAPE US: captures of the run in a COLS-wide tmux window, checked by tests/bar_check.py
run_loop() {
  cols=$1 shape=$2 us=$3 sock="hooks_log_bar_$$_$2_$1" shots="$dir/loop_$2_$1"
  mkdir -p "$shots"
  tmux -L "$sock" -f /dev/null new-session -d -x "$cols" -y 30 "'$bin' --bar-loop $shape $us; echo EXIT=\$?; sleep 30" || fail "tmux did not start"
  i=0
  while [ $i -lt 300 ]; do
    sleep 0.1
    shot=$(printf '%s/%03d.txt' "$shots" $i)
    tmux -L "$sock" capture-pane -p -J > "$shot" 2>/dev/null || break
    grep -q '^EXIT=' "$shot" && break
    i=$((i + 1))
  done
  tmux -L "$sock" kill-server 2>/dev/null
  grep -q '^EXIT=0' "$shot" || { cat "$shot"; fail "$shape, $cols columns: the run in tmux did not finish"; }
  python3 "$(dirname "$0")/bar_check.py" $shape $cols "$shots"/*.txt || fail "$shape, $cols columns: see above"
  echo "log_bar: the last capture: $(grep '%|' "$shot")"
}
for c in 80 120; do for shape in steps llmc epochs; do run_loop $c $shape 10000; done; done
run_loop 80 fast-epochs 200
