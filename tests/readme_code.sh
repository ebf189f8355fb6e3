#!/bin/sh
# Compiles and runs every ```c block of README.md that has a main(), so the quick starts cannot rot.
# usage: tests/readme_code.sh README.md <build-dir> <cc> <cflags...>
set -eu
readme=$1; out=$2; cc=$3; shift 3
mkdir -p "$out"
awk -v out="$out" '
  /^```c$/ { n++; f = sprintf("%s/readme_%d.c", out, n); inblock = 1; printf "" > f; next }
  /^```$/ && inblock { inblock = 0; close(f); next }
  inblock { print >> f }
' "$readme"
ran=0
for src in "$out"/readme_*.c; do
  grep -q 'int main' "$src" || continue
  bin=${src%.c}
  "$cc" "$@" -o "$bin" "$src" -lm || { echo "readme-code: $src (from $readme) does not compile" >&2; exit 1; }
  "$bin" > "$bin.out" || { echo "readme-code: $src (from $readme) exited nonzero" >&2; cat "$bin.out" >&2; exit 1; }
  ran=$((ran + 1))
done
[ "$ran" -ge 2 ] || { echo "readme-code: expected at least 2 runnable examples in $readme, found $ran" >&2; exit 1; }
echo "readme-code: $ran README examples compile warning-free and run"
