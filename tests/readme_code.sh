#!/bin/sh
# Compiles and runs every ```c block with a main() of README.md and the docs/ pages, so the quick starts
# cannot rot.
# usage: tests/readme_code.sh "README.md docs/*.md" <build-dir> <cc> <cflags...>
set -eu
files=$1; out=$2; cc=$3; shift 3
mkdir -p "$out"
rm -f "$out"/readme_*.c
ran=0
for readme in $files; do
  base=$(basename "$readme" .md)
  awk -v out="$out" -v base="$base" '
    /^```c$/ { n++; f = sprintf("%s/readme_%s_%d.c", out, base, n); inblock = 1; printf "" > f; next }
    /^```$/ && inblock { inblock = 0; close(f); next }
    inblock { print >> f }
  ' "$readme"
  for src in "$out"/readme_"$base"_*.c; do
    [ -e "$src" ] || continue
    grep -q 'int main' "$src" || continue
    bin=${src%.c}
    "$cc" "$@" -o "$bin" "$src" -lm || { echo "readme-code: $src (from $readme) does not compile" >&2; exit 1; }
    "$bin" > "$bin.out" || { echo "readme-code: $src (from $readme) exited nonzero" >&2; cat "$bin.out" >&2; exit 1; }
    ran=$((ran + 1))
  done
done
[ "$ran" -ge 2 ] || { echo "readme-code: expected at least 2 runnable examples in $files, found $ran" >&2; exit 1; }
echo "readme-code: $ran examples of $files compile warning-free and run"
