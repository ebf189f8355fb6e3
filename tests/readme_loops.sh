#!/bin/sh
# The README's two loops are the examples' own lines: every line of the ```c blocks under "## Your own loop" is
# a line of examples/own_loop.c (the first block) or examples/epoch_loop.c (the second), indentation and a
# closing comment aside.
set -eu
out=$1
mkdir -p "$out"
awk -v out="$out" '
  /^## / { inside = ($0 == "## Your own loop") }
  inside && /^```c$/ { n++; f = sprintf("%s/loop_%d.c", out, n); printf "" > f; inblock = 1; next }
  /^```$/ && inblock { inblock = 0; close(f); next }
  inblock { print >> f }
' README.md
check() { # block example
  [ -s "$1" ] || { echo "readme-loops: no code block $1 under '## Your own loop'" >&2; exit 1; }
  strip='s/^ *//; s|[ ]*/\*[^*]*\*/$||; s/ *$//' # indentation and a comment at the end aside
  sed "$strip" "$2" > "$1.ex"
  sed "$strip" "$1" | while IFS= read -r line; do
    [ -z "$line" ] && continue
    grep -qxF -- "$line" "$1.ex" || { echo "readme-loops: this README line is not in $2: $line" >&2; exit 1; }
  done
}
check "$out/loop_1.c" examples/own_loop.c
check "$out/loop_2.c" examples/epoch_loop.c
echo "readme-loops: the README's step and epoch loops are examples/own_loop.c's and examples/epoch_loop.c's lines"
