#!/bin/sh
# tests/log_bar.sh BIN DIR - the progress bar in a real terminal (tmux) and in a pipe.
#   terminal: as wide as the terminal less one column (tqdm); every snapshot of the screen shows at most one training bar and one evaluation bar, and
#             at the end exactly one line: the last epoch's bar at 100% (the validation line erased)
#   pipe:     complete lines only: no carriage return, no escape code; every epoch's final line
set -u
bin=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir"
fail() { echo "log_bar: $*" >&2; exit 1; }

# -- pipe --
"$bin" --bar 5 | cat > "$dir/pipe.txt" || fail "the run in a pipe failed"
if grep -q "$(printf '\r')" "$dir/pipe.txt"; then fail "a carriage return in the pipe output"; fi
if grep -q "$(printf '\033')" "$dir/pipe.txt"; then fail "an escape code in the pipe output"; fi
for e in 0 1 2; do grep -q "^Epoch $e: 100%|.*| 4/4 \[" "$dir/pipe.txt" || fail "no final line for epoch $e in the pipe"; done
grep -q "^Validation: 100%|.*| 2/2 \[" "$dir/pipe.txt" || fail "no validation line in the pipe"
grep -q "loss=" "$dir/pipe.txt" || fail "no loss in the postfix"
echo "log_bar: pipe: $(wc -l < "$dir/pipe.txt") complete lines, no carriage return, no escape code"

# -- terminal --
command -v tmux >/dev/null 2>&1 || fail "tmux is not installed (scripts/deps.sh installs it)"
sock="hooks_log_bar_$$"
export TERM=xterm-256color
tmux -L "$sock" -f /dev/null new-session -d -x 110 -y 24 "'$bin' --bar 60; echo EXIT=\$?; sleep 30" || fail "tmux did not start"
i=0 shots=0
while [ $i -lt 100 ]; do
  sleep 0.1
  tmux -L "$sock" capture-pane -p > "$dir/screen.txt" 2>/dev/null || break
  shots=$((shots + 1))
  n_train=$(grep -c '^Epoch [0-9]*: ' "$dir/screen.txt")
  n_eval=$(grep -c '^\(Validation\|Sanity Checking\): ' "$dir/screen.txt")
  [ "$n_train" -le 1 ] || { cat "$dir/screen.txt"; tmux -L "$sock" kill-server; fail "$n_train training bars on the screen"; }
  [ "$n_eval" -le 1 ] || { cat "$dir/screen.txt"; tmux -L "$sock" kill-server; fail "$n_eval evaluation bars on the screen"; }
  grep -q '^EXIT=' "$dir/screen.txt" && break
  i=$((i + 1))
done
tmux -L "$sock" kill-server 2>/dev/null
grep -q '^EXIT=0' "$dir/screen.txt" || { cat "$dir/screen.txt"; fail "the run in tmux did not finish"; }
[ "$(grep -c '|' "$dir/screen.txt")" -eq 1 ] || { cat "$dir/screen.txt"; fail "not exactly one bar left on the screen"; }
grep -q '^Epoch 2: 100%|.*| 4/4 \[.*loss=.*val/loss=' "$dir/screen.txt" || { cat "$dir/screen.txt"; fail "the last bar is not epoch 2 at 100% with loss and val/loss"; }
width=$(grep '^Epoch' "$dir/screen.txt" | python3 -c 'import sys; print(len(sys.stdin.buffer.read().decode().rstrip("\n").rstrip()))')
[ "$width" -eq 109 ] || fail "the bar is $width characters wide; the terminal has 110 columns (tqdm: 110 - 1)"
echo "log_bar: terminal: $shots screenshots, never more than one bar per line kind; at the end: $(grep '^Epoch' "$dir/screen.txt")"
