#!/bin/sh
# scripts/test_times.sh [BUILD] [TARGET...] - time each test target (default: every one in TEST_TARGETS,
# in make test's order) on a fresh build directory (default build-time, removed first), one make call
# each, serially; prints a table: total, build (compiler lines), run (the rest), load average at the
# start. A binary shared by several targets counts for the first one that builds it. Each recipe line's
# time is in BUILD/<target>.lines.tsv (scripts/timesh).
set -u
B=${1:-build-time}; [ $# -gt 0 ] && shift
targets=${*:-$(make --no-print-directory -s print-test-targets)}
case "$B" in ""|.|..|/|./|../) echo "test_times: give a build directory of its own, not '$B'" >&2; exit 2 ;; esac
rm -rf "$B"; mkdir -p "$B"
log=$(mktemp); res="$B/times.tsv"; : > "$res"
printf '%-24s %8s %8s %8s  %s\n' target total build run "load(1m)"
all0=$(date +%s)
for t in $targets; do
  : > "$log"; load=$(cut -d' ' -f1 /proc/loadavg)
  s=$(date +%s%N)
  TIMESH_LOG=$log make --no-print-directory BUILD="$B" SHELL="$(pwd)/scripts/timesh" "$t" > "$B/$t.time.out" 2>&1; rc=$?
  e=$(date +%s%N)
  tot=$(awk -v a="$s" -v b="$e" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  bld=$(awk -F'\t' '$2 == "build" { s += $1 } END { printf "%.1f", s }' "$log")
  run=$(awk -v t="$tot" -v b="$bld" 'BEGIN { printf "%.1f", t - b }')
  st=""; [ $rc = 0 ] || st="  FAILED (rc $rc, see $B/$t.time.out)"
  printf '%-24s %8s %8s %8s  %s%s\n' "$t" "$tot" "$bld" "$run" "$load" "$st"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$tot" "$bld" "$run" "$load" "$rc" >> "$res"
  cp "$log" "$B/$t.lines.tsv"
done
rm -f "$log"
echo "all: $(( $(date +%s) - all0 )) s"
