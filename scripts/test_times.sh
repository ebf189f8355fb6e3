#!/bin/sh
# scripts/test_times.sh [BUILD] [TARGET...] - time each test target (default: every one in TEST_TARGETS,
# in make test's order) on a fresh build directory (default build-time, removed first), one make call
# each, serially; prints a table: total, build (compiler lines), run (the rest), load average at the
# start. A binary shared by several targets counts for the first one that builds it. Each recipe line's
# time is in BUILD/<target>.lines.tsv (scripts/timesh). At the end: make test's schedule replayed with
# these times on TEST_JOBS slots (default: one per core), each target on the first slot free in make
# test's order, and its critical path: the slot that ends last, target by target.
set -u
B=${1:-build-time}; [ $# -gt 0 ] && shift
targets=${*:-$(make --no-print-directory -s print-test-order)}
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
jobs=${TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}
awk -F'\t' -v J="$jobs" '
  { n++; name[n] = $1; t[n] = $2 + 0; sum += t[n]; if (t[n] > longest) longest = t[n] }
  END {
    for (j = 1; j <= J; j++) { free_at[j] = 0; chain[j] = "" }
    for (i = 1; i <= n; i++) { # the first slot free takes the next target
      b = 1; for (j = 2; j <= J; j++) if (free_at[j] < free_at[b]) b = j
      chain[b] = chain[b] sprintf("%s%s %.0f-%.0f", chain[b] == "" ? "" : " -> ", name[i], free_at[b], free_at[b] + t[i])
      free_at[b] += t[i]
    }
    e = 1; for (j = 2; j <= J; j++) if (free_at[j] > free_at[e]) e = j
    bound = sum / J > longest ? sum / J : longest
    printf "schedule: make test'\''s order on %d slots ends at %.0f s (bound: max(total/%d, longest) = %.0f s; %.0f%% over)\n", J, free_at[e], J, bound, 100 * (free_at[e] / bound - 1)
    printf "critical path (the slot that ends last, s from the start): %s\n", chain[e]
  }' "$res"
