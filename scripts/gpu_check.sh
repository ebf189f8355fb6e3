#!/usr/bin/env bash
# scripts/gpu_check.sh - the CUDA path on a real GPU, in one command (make gpu-check).
#
# Finds nvcc and the GPU, builds every CUDA binary for that GPU (make -j$(nproc) cuda-build, with the
# CUDA_GENCODE of its compute capability), then runs make cuda-test, cuda-bench and cuda-demo, each
# under `timeout`, the whole under GPU_CHECK_TIMEOUT seconds. Installs nothing: a missing tool is named
# in the summary. Writes under $OUT (default ./gpu-check-out), at most 7 plain files:
#   summary.txt   GPU, driver, CUDA runtime and nvcc versions, pass/fail per step with the first
#                 failing lines, the bench table, the device checks (host waits, GPU vs CPU training,
#                 device_stats's GPU utilisation and memory read through NVML)
#   env.txt       nvidia-smi's and the CUDA runtime's own words, nvcc --version
#   build.log, cuda-test.log, cuda-bench.log, cuda-demo.log   the raw output of each step (and
#                 build-retry.log: when the build failed only on warnings made errors, it is FAIL, and
#                 rebuilt without -Werror so that the GPU runs still happen)
# and prints the summary at the end. Exit status: 0 when every step passed, or when no GPU is there and
# everything that can run without one did (every GPU run then says "skipped: no CUDA device"); 1 when a
# build, a test or the time limit failed (the build's first error lines are in the summary); 2 on bad use.
#
#   scripts/gpu_check.sh            build into build/gpu-check/ for the GPU found, then run
#   scripts/gpu_check.sh --reuse    no build: run the binaries already in build/cuda/ (make test's
#                                   test-gpu-check, after test-cuda-build built them)
#   scripts/gpu_check.sh --pack     (on a machine with libstb-dev) copy stb_ds.h into
#                                   build/gpu-check-carry/, for a GPU machine that lacks it: carry that folder
# Environment: OUT, NVCC (else found on PATH, in $CUDA_HOME, /usr/local/cuda*, /opt/cuda), CUDA_GENCODE
# (overrides the detected one), GPU_CHECK_TIMEOUT (default 450 s), JOBS (default nproc), STB_INC,
# CUDA_BENCH_N (the bench's parameter count, default 1e8).
set -u
cd "$(dirname "$0")/.." || exit 2
MODE=build
case "${1:-}" in
  "") ;;
  --reuse) MODE=reuse ;;
  --pack) MODE=pack ;;
  *) echo "gpu_check: unknown option '$1' (expected --reuse, --pack or nothing)" >&2; exit 2 ;;
esac
CARRY=build/gpu-check-carry

# stb_ds.h (hooks.h's implementation includes <stb/stb_ds.h>): the first include dir that has it.
find_stb() {
  local d
  for d in ${STB_INC:-} /usr/include /usr/local/include "$CARRY/include"; do
    [ -f "$d/stb/stb_ds.h" ] && { echo "$d"; return 0; }
  done
  return 1
}
if [ $MODE = pack ]; then
  s=$(find_stb) || { echo "gpu_check: --pack: stb/stb_ds.h not found here either (install libstb-dev)" >&2; exit 1; }
  mkdir -p "$CARRY/include/stb" && cp "$s/stb/stb_ds.h" "$CARRY/include/stb/" || exit 1
  echo "gpu_check: copied $s/stb/stb_ds.h into $CARRY/include/stb/: name $CARRY in the device run's carry"
  exit 0
fi

T0=$(date +%s)
LIMIT=${GPU_CHECK_TIMEOUT:-450}
DEADLINE=$((T0 + LIMIT))
OUT=${OUT:-./gpu-check-out}
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT/summary.txt" "$OUT/env.txt" "$OUT"/build.log "$OUT"/build-retry.log "$OUT"/cuda-*.log
if [ $MODE = reuse ]; then BDIR=${GPU_CHECK_BUILD_DIR:-build}; else BDIR=${GPU_CHECK_BUILD_DIR:-build/gpu-check}; fi
case "$BDIR" in /*|../*) echo "gpu_check: GPU_CHECK_BUILD_DIR must be a folder inside the repository, relative to it (tests/cuda.mk runs ./\$(BUILD)/cuda/...), not '$BDIR'" >&2; exit 2 ;; esac
mkdir -p "$BDIR" || exit 2
WORK=$BDIR/gpu-check-work   # scratch that must not go to $OUT (its files come back, 8 at most)
rm -rf "$WORK"; mkdir -p "$WORK"
RES=$WORK/results           # one line per step: name|status|seconds|note
: > "$RES"
MISSING=""
say() { echo "gpu_check: $*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }
for t in make timeout "${CC:-cc}" nvidia-smi; do have "$t" || MISSING="$MISSING $t"; done
unset MAKEFLAGS MFLAGS MAKELEVEL   # inside make test: no jobserver or output-sync from the outer make
MK=(make --no-print-directory BUILD="$BDIR")

# ---- nvcc ----------------------------------------------------------------------------------------
NVCC_PATH=""
if [ -n "${NVCC:-}" ]; then
  NVCC_PATH=$(command -v "$NVCC" 2>/dev/null) || MISSING="$MISSING nvcc(NVCC=$NVCC)"
else
  for c in "$(command -v nvcc 2>/dev/null)" ${CUDA_HOME:+"$CUDA_HOME/bin/nvcc"} /usr/local/cuda/bin/nvcc \
           $(ls -d /usr/local/cuda-*/bin/nvcc 2>/dev/null | sort -rV) /opt/cuda/bin/nvcc; do
    [ -n "$c" ] && [ -x "$c" ] && { NVCC_PATH=$c; break; }
  done
  [ -n "$NVCC_PATH" ] || MISSING="$MISSING nvcc"
fi
[ -n "$NVCC_PATH" ] && MK+=(NVCC="$NVCC_PATH")
NVCC_VERSION=""
[ -n "$NVCC_PATH" ] && { NVCC_VERSION=$("$NVCC_PATH" --version 2>&1 | grep -m1 -i release) || NVCC_VERSION="no release line from '$NVCC_PATH --version'"; }
CUDA_ROOT=""
for d in ${CUDA_HOME:-} $([ -n "$NVCC_PATH" ] && dirname "$(dirname "$(readlink -f "$NVCC_PATH")")") /usr/local/cuda /usr; do
  [ -f "$d/include/cuda_runtime_api.h" ] && { CUDA_ROOT=$d; break; }
done
STB=$(find_stb) && MK+=(STB_INC="$STB") || MISSING="$MISSING stb/stb_ds.h(libstb-dev:run-'scripts/gpu_check.sh --pack'-where-it-is-and-carry-$CARRY)"

# ---- the GPU: nvidia-smi, then the CUDA runtime itself (scripts/gpu_query.c) ---------------------------
{
  echo "== nvidia-smi"; if have nvidia-smi; then timeout 30 nvidia-smi 2>&1; else echo "(not found)"; fi
  echo "== nvcc: ${NVCC_PATH:-not found}"; [ -n "$NVCC_PATH" ] && "$NVCC_PATH" --version 2>&1
} > "$OUT/env.txt"
SMI=""; SMI_CUDA=""
if have nvidia-smi; then
  SMI=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader 2>/dev/null | head -1)
  SMI_CUDA=$(timeout 30 nvidia-smi 2>/dev/null | grep -o 'CUDA Version: *[0-9.]*' | head -1 | sed 's/.*: *//')
fi
Q=$WORK/gpu_query; QOUT=""
if [ -n "$CUDA_ROOT" ]; then
  lib=$CUDA_ROOT/lib64; [ -d "$lib" ] || lib=$CUDA_ROOT/lib
  if "${CC:-cc}" -std=c99 -I"$CUDA_ROOT/include" scripts/gpu_query.c -o "$Q" -L"$lib" -Wl,-rpath,"$lib" -lcudart \
       > "$WORK/gpu_query.err" 2>&1; then
    QOUT=$(timeout 30 "$Q" 2>&1)
  else QOUT="error=scripts/gpu_query.c did not build: $(head -c 300 "$WORK/gpu_query.err")"; fi
else QOUT="error=cuda_runtime_api.h not found (no CUDA toolkit)"; fi
{ echo "== CUDA runtime (scripts/gpu_query.c)"; echo "$QOUT"; } >> "$OUT/env.txt"
q() { printf '%s\n' "$QOUT" | sed -n "s/^$1=//p" | head -1; }
ver() { [ -n "$1" ] && [ "$1" != 0 ] && echo "$(($1 / 1000)).$((($1 % 1000) / 10))" || echo "none"; }
GPU_NAME=""; GPU_CC=""; DRIVER=""
if [ -n "$SMI" ]; then
  IFS=, read -r GPU_NAME DRIVER GPU_CC GPU_MEM <<< "$SMI"
  GPU_NAME=$(echo $GPU_NAME); DRIVER=$(echo $DRIVER); GPU_CC=$(echo $GPU_CC); GPU_MEM=$(echo $GPU_MEM)
  case "$GPU_CC" in [0-9]*.[0-9]*) ;; *) GPU_CC="" ;; esac   # old drivers: "[Field not found]"
fi
[ -n "$GPU_NAME" ] || GPU_NAME=$(q name)
[ -n "$GPU_CC" ] || GPU_CC=$(q cc)
HAVE_GPU=0; [ -n "$GPU_NAME" ] && HAVE_GPU=1
QERR=$(q error)

# ---- CUDA_GENCODE: machine code for this GPU, or PTX of the newest older arch nvcc knows --------------
GENCODE=""; GENCODE_WHY=""
if [ -n "${CUDA_GENCODE:-}" ]; then GENCODE=$CUDA_GENCODE; GENCODE_WHY="from the environment"
elif [ -n "$GPU_CC" ] && [ -n "$NVCC_PATH" ]; then
  a=${GPU_CC/./}
  codes=$("$NVCC_PATH" --list-gpu-code 2>/dev/null | tr '\n' ' ')
  if [ -z "$codes" ] || [[ " $codes " == *" sm_$a "* ]]; then
    GENCODE="-gencode arch=compute_$a,code=sm_$a"; GENCODE_WHY="compute capability $GPU_CC"
  else
    p=$("$NVCC_PATH" --list-gpu-arch 2>/dev/null | sed -n 's/^compute_\([0-9]*\)$/\1/p' | awk -v a="$a" '$1 <= a' | sort -n | tail -1)
    if [ -n "$p" ]; then GENCODE="-gencode arch=compute_$p,code=compute_$p"
         GENCODE_WHY="compute capability $GPU_CC: this nvcc has no sm_$a, so compute_$p PTX (JIT-compiled by the driver)"
    else GENCODE_WHY="compute capability $GPU_CC: this nvcc knows no arch at or below it; the Makefile's pinned ones"; fi
  fi
else GENCODE_WHY="no GPU found: the Makefile's pinned architectures"; fi
[ -n "$GENCODE" ] && MK+=(CUDA_GENCODE="$GENCODE")
[ -n "${CUDA_BENCH_N:-}" ] && MK+=(CUDA_BENCH_N="$CUDA_BENCH_N")

# ---- steps ----------------------------------------------------------------------------------------
first_lines() { # the first lines that say what failed (not make's echo of a command), else the last lines
  grep -v -E '^(\S*/)?(nvcc|cc|gcc|g\+\+|clang|false) -|^\./[^: ]+( |$)' "$1" |
    grep -m "$2" -E '(^|[ :(])(error|Error|ERROR|fatal|FAIL|failed|Assertion|Segmentation|Aborted|undefined reference|No such file)' \
    || tail -n "$2" "$1"
}
# run_step NAME SECONDS CMD...: under timeout (and what is left of the global limit), log in $OUT/NAME.log
run_step() {
  local name=$1 want=$2 left st note="" s rc; shift 2
  left=$((DEADLINE - $(date +%s)))
  [ "$want" -gt "$left" ] && want=$left
  if [ "$want" -lt 5 ]; then echo "$name|NOT RUN|0|the global limit of $LIMIT s was reached" >> "$RES"; say "$name: not run (global limit)"; return 1; fi
  say "$name: running (at most $want s)"
  s=$(date +%s)
  timeout -k 10 "$want" "$@" > "$OUT/$name.log" 2>&1; rc=$?
  s=$(($(date +%s) - s))
  if [ $rc = 124 ] || [ $rc = 137 ]; then st=TIMEOUT; note="killed after $want s"
  elif [ $rc != 0 ]; then st=FAIL; note="exit status $rc"
  elif grep -q "skipped: no CUDA device" "$OUT/$name.log"; then
    if [ $HAVE_GPU = 1 ]; then st=FAIL; note="skipped although a GPU was found: $(grep -m1 'skipped' "$OUT/$name.log")"
    else st=SKIPPED; note=$(grep -m1 'skipped' "$OUT/$name.log"); fi
  elif grep -q "skipped: .* not found" "$OUT/$name.log"; then st=FAIL; note=$(grep -m1 'skipped' "$OUT/$name.log")
  else st=PASS; fi
  echo "$name|$st|$s|$note" >> "$RES"
  say "$name: $st ($s s)"
  [ $st = PASS ] || [ $st = SKIPPED ]
}

BUILD_OK=1
if [ $MODE = build ]; then
  if [ -z "$NVCC_PATH" ] || [ -z "${STB:-}" ] || ! have make; then
    echo "build|FAIL|0|cannot build, missing:$MISSING" >> "$RES"; BUILD_OK=0
    echo "missing:$MISSING" > "$OUT/build.log"
  else
    # A GPU of another compute capability than the last build's: build afresh (make tracks no flags).
    stamp="$BDIR/cuda/gencode"
    [ -f "$stamp" ] && [ "$(cat "$stamp")" != "$GENCODE" ] && rm -rf "$BDIR/cuda"
    mkdir -p "$BDIR/cuda" && printf '%s' "$GENCODE" > "$stamp"
    if ! run_step build 300 "${MK[@]}" -j"${JOBS:-$(nproc)}" cuda-build; then
      BUILD_OK=0
      # Only warnings made errors (another host compiler than CI's warns more): the result stays FAIL,
      # but the GPU runs still happen on a build without -Werror, so the device time is not lost.
      if grep -q -E '\[-Werror|warnings being treated as errors' "$OUT/build.log" && ! grep -v -E '\[-Werror' "$OUT/build.log" | grep -q -E '(^|[ :(])error[: ]'; then
        run_step build-retry 240 "${MK[@]}" -j"${JOBS:-$(nproc)}" CUDA_WERROR= WARN="-Wall -Wextra -pedantic" cuda-build && BUILD_OK=2
      fi
    fi
  fi
else
  for b in test_cuda bench_cuda cuda_demo; do
    [ -x "$BDIR/cuda/$b" ] || { BUILD_OK=0; echo "reuse: $BDIR/cuda/$b is not built (make test-cuda-build builds it)" >> "$OUT/build.log"; }
  done
  if [ $BUILD_OK = 1 ]; then
    echo "build|REUSED|0|the binaries in $BDIR/cuda/ (--reuse: nothing compiled)" >> "$RES"
    MK+=(-o "$BDIR/cuda/cuda_mlp.o" -o "$BDIR/cuda/bench_cuda.o")   # never nvcc again here
  else echo "build|FAIL|0|$(cat "$OUT/build.log")" >> "$RES"; fi
fi
if [ $BUILD_OK != 0 ]; then
  run_step cuda-test 200 "${MK[@]}" cuda-test
  run_step cuda-bench 60 "${MK[@]}" cuda-bench
  run_step cuda-demo 120 "${MK[@]}" cuda-demo
fi

# ---- summary ----------------------------------------------------------------------------------------
# the device checks, from the tests' own lines: 0 host waits with nothing registered, the MLP on the
# GPU against the CPU run (relative L2 of the parameters < 1e-3, what tests/test_cuda.c asserts)
device_checks() {
  local t=$OUT/cuda-test.log d=$OUT/cuda-demo.log w
  echo "| check | measured | goal | verdict |"
  echo "|---|---|---|---|"
  w=$(sed -n 's/^waits in \([0-9]*\) steps, nothing registered.*: \([0-9]*\)$/\1 \2/p' "$t" 2>/dev/null | head -1)
  if [ -n "$w" ]; then set -- $w
    echo "| host waits in $1 steps with nothing registered (tr_cuda_sync_count) | $2 | 0 | $([ "$2" = 0 ] && echo meets || echo MISSES) |"
  else echo "| host waits in a step with nothing registered (tr_cuda_sync_count) | not measured | 0 | - |"; fi
  if grep -q '^training, GPU vs CPU' "$t" 2>/dev/null; then
    sed -n 's/^training, GPU vs CPU (\(.*\)): relative L2 difference of the parameters \(.*\)$/\1|\2/p' "$t" |
      awk -F'|' '{ printf "| spirals MLP on the GPU vs the CPU run (%s): relative L2 of the parameters | %s | < 1e-3 | %s |\n", $1, $2, ($2 + 0 < 1e-3) ? "meets" : "MISSES" }'
  else echo "| spirals MLP on the GPU vs the CPU run: relative L2 of the parameters | not measured | < 1e-3 | - |"; fi
  # device_stats (TRAIN_CUDA): what it read through NVML, from tests/test_cuda.c's line
  w=$(sed -n 's/^device_stats on the GPU through NVML (\(.*\)): \(.*\)$/\1|\2/p' "$t" 2>/dev/null | head -1)
  if [ -n "$w" ]; then
    echo "| device_stats through NVML ($(echo "$w" | cut -d'|' -f1)): GPU utilisation, memory used of total | $(echo "$w" | cut -d'|' -f2) | read, 0 host waits | $(case "$w" in *", 0 host waits|"*) echo meets ;; *) echo MISSES ;; esac) |"
  elif w=$(sed -n 's/^device_stats on the GPU: no GPU metrics: //p' "$t" 2>/dev/null | head -1) && [ -n "$w" ]; then
    echo "| device_stats through NVML: GPU utilisation, memory used of total | not read: $w | read | MISSES |"
  elif [ $HAVE_GPU = 0 ]; then echo "| device_stats through NVML: GPU utilisation, memory used of total | skipped: no device | read | - |"
  else echo "| device_stats through NVML: GPU utilisation, memory used of total | not measured | read | - |"; fi
  w=$(grep -o 'the host waited for the GPU [0-9]* times' "$d" 2>/dev/null | grep -o '[0-9]*')
  [ -n "$w" ] && echo "| cuda_demo: host waits in $(sed -n 's/^trained \([0-9]*\) steps.*/\1/p' "$d") steps, hooks reading lazily | $w | not one per step | $([ "$w" -lt "$(sed -n 's/^trained \([0-9]*\) steps.*/\1/p' "$d")" ] && echo meets || echo MISSES) |"
  return 0
}
nfail=$(grep -c -E '\|(FAIL|TIMEOUT|NOT RUN)\|' "$RES")
nskip=$(grep -c '|SKIPPED|' "$RES")
if [ $BUILD_OK = 0 ] || [ "$nfail" -gt 0 ]; then RESULT="FAIL: $nfail step(s) failed$([ $BUILD_OK = 0 ] && echo ', the build first: nothing ran')$([ $BUILD_OK = 2 ] && echo ', the build only by warnings made errors: the runs used a build without -Werror')"; RC=1
elif [ $HAVE_GPU = 0 ]; then RESULT="NO DEVICE: built and ran what needs no GPU; every GPU run said 'skipped: no CUDA device' ($nskip skipped); nothing measured"; RC=0
else RESULT="PASS: every step passed on $GPU_NAME"; RC=0; fi
{
  c=$(git rev-parse --short HEAD 2>/dev/null) && { git diff --quiet HEAD 2>/dev/null || c="$c (with local changes)"; } || c="? (no git here)"
  echo "gpu_check: hooks.h / train.h's CUDA path, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $c"
  echo "RESULT: $RESULT"
  echo
  echo "host:         $(hostname 2>/dev/null), $(nproc) cores, mode $MODE, build dir $BDIR"
  if [ $HAVE_GPU = 1 ]; then echo "GPU:          $GPU_NAME, compute capability ${GPU_CC:-?}${GPU_MEM:+, $GPU_MEM}$( [ -n "$(q sms)" ] && echo ", $(q sms) SMs")"
  else echo "GPU:          none found (nvidia-smi: $(have nvidia-smi && echo 'no GPU listed' || echo 'not installed'); CUDA runtime: ${QERR:-?})"; fi
  echo "driver:       ${DRIVER:-none}$([ -n "$SMI_CUDA" ] && echo " (supports CUDA $SMI_CUDA)") ; driver API $(ver "$(q driver)")"
  echo "CUDA runtime: $(ver "$(q runtime)") (libcudart of ${CUDA_ROOT:-no toolkit})"
  echo "nvcc:         ${NVCC_VERSION:-not found} (${NVCC_PATH:-none})"
  echo "CUDA_GENCODE: ${GENCODE:-(Makefile default)} ($GENCODE_WHY)"
  echo "stb_ds.h:     ${STB:-not found}"
  echo "missing:      ${MISSING:- none}"
  [ -n "$QERR" ] && [ $HAVE_GPU = 1 ] && echo "CUDA runtime error: $QERR"
  echo
  echo "| step | result | seconds | note |"
  echo "|---|---|---|---|"
  awk -F'|' '{ printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4 }' "$RES"
  while IFS='|' read -r name st _ _; do
    [ "$st" = FAIL ] || [ "$st" = TIMEOUT ] || continue
    [ -s "$OUT/$name.log" ] || continue
    echo; echo "first failing lines of $name ($OUT/$name.log):"
    first_lines "$OUT/$name.log" 15 | sed 's/^/    /'
  done < "$RES"
  if [ -s "$OUT/cuda-bench.log" ]; then echo; echo "bench (make cuda-bench):"; sed 's/^/    /' "$OUT/cuda-bench.log"; fi
  echo; echo "device checks (from make cuda-test and make cuda-demo):"
  device_checks
  for f in cuda-test cuda-demo; do # what the tests say (the batteries on the device too), in their words
    [ -s "$OUT/$f.log" ] || continue
    echo; echo "$f says (the first 40 lines, make's echo left out):"
    grep -v -E '^\./[^: ]+( |$)|^rm -rf ' "$OUT/$f.log" | head -40 | sed 's/^/    /'
  done
  echo; echo "total: $(($(date +%s) - T0)) s of the $LIMIT s limit; raw logs in $OUT"
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
exit $RC
