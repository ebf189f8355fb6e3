#!/bin/sh
# bench/compile_reach.sh CC FLAGS... - how much of a loop's compiled train.h its program can reach: compiles
# examples/own_loop.c with FLAGS (bench-compile passes its 7-battery row's defines) at -O2 with each function in
# a section of its own, links it with --gc-sections, and prints the functions the linker dropped as never
# called (what "compile only what the loop uses" could still leave out) against all of them, by count and size.
set -eu
cc=$1; shift
d=build/bench_compile_tu
mkdir -p "$d"
"$cc" -std=c99 -O2 -I. "$@" -ffunction-sections -c examples/own_loop.c -o "$d/reach.o"
"$cc" "$d/reach.o" -o "$d/reach" -lm -Wl,--gc-sections -Wl,--print-gc-sections 2> "$d/reach.gc"
sed -n "s/.*'\.text\.\([^']*\)'.*/\1/p" "$d/reach.gc" > "$d/reach.dropped"
nm -S -t d "$d/reach.o" | awk -v dropped="$d/reach.dropped" '
  BEGIN { while ((getline f < dropped) > 0) gone[f] = 1 }
  $3 ~ /^[tT]$/ { n++; s += $2; if ($4 in gone) { m++; g += $2 } }
  END { printf "reach: examples/own_loop.c built with the 7-battery row: %d of its %d functions (%.1f of %.1f KB, %.0f%%) are never called\n" \
               "       (--gc-sections drops them); the rest is reachable from the loop and its spec string\n", m, n, g / 1024, s / 1024, 100 * g / s }'
