#!/bin/sh
# one-off device-machine measurement for issue 41 (not committed)
S=build/gpu-check-carry/include
W="-Wall -Wextra -pedantic"
{ date; uptime; nproc; lscpu | grep -E "Model name|L3|^CPU\(s\)"; gcc --version | head -1; which mpicc mpirun; } > $OUT/env.txt 2>&1
make STB_INC=$S WARN="$W" build/math_bench > $OUT/build.txt 2>&1
gcc -std=c99 -O2 -g -Ibuild/perf-old -I. -I$S -fopenmp bench/math_bench.c build/math_ref.o -o build/math_bench_old -lm >> $OUT/build.txt 2>&1
for i in 1 2; do
  { uptime; build/math_bench 0; uptime; } > $OUT/math_new_$i.txt 2>&1
  { uptime; build/math_bench_old 0; uptime; } > $OUT/math_old_$i.txt 2>&1
done
if command -v mpicc >/dev/null 2>&1; then
  { uptime; timeout 200 make STB_INC=$S WARN="$W" bench-mpi-zero; uptime; } > $OUT/zero.txt 2>&1
else echo "no mpicc" > $OUT/zero.txt; fi
