#!/bin/sh
# tests/zero_cost/run.sh DIR - the zero-cost test (built by tests/zero_cost/zero_cost.mk into DIR).
#
# Counts instructions with callgrind, which is exact, and compares machine code with objdump.
# There are no wall-clock thresholds. It fails when:
#   - an empty site (HK_FIRE or an HK_ACTIVE guard with nothing registered) costs more than 3 instructions;
#   - a -DHK_DISABLE build of zc_step is not instruction-identical to the same function with no site,
#     both in its disassembly and in its callgrind counts;
#   - a -DHK_DISABLE object still refers to the dispatcher, the registry or the lazy argument;
#   - an armed site did not actually run its hooks (so the measurement was of a real site);
#   - against a hand-written loop over the same number of function pointers (zc_fnptr): each hook
#     after the first costs more than HOOK_BUDGET instructions beyond the loop's own cost per pointer
#     (1 -> 16 hooks), or a site with one hook costs more than RATIO_BUDGET times the loop over one
#     pointer (the loop included: what the dispatch records in the ctx and its checks must fit in
#     what the loop itself costs).
#
# Instructions per iteration = (Ir(N2) - Ir(N1)) / (N2 - N1). Two N with the same number of digits
# make everything outside the loop (start-up, argv parsing, registration) cancel exactly. It is
# measured twice: program totals (authoritative: nothing the site costs can hide) and
# --toggle-collect=zc_step (the step function and its callees only).
set -u
D=${1:-build/zero_cost}
N1=1000000
N2=2000000
BUDGET=3
HOOK_BUDGET=4
RATIO_BUDGET=2
fail=0

if ! command -v valgrind >/dev/null 2>&1; then
  echo "zero-cost: FAIL: valgrind not found (run: make deps)"; exit 1
fi
for v in nosite fire active fire_off active_off fnptr; do
  [ -x "$D/zc_$v" ] || { echo "zero-cost: FAIL: $D/zc_$v missing (build it with make)"; exit 1; }
done

# ir BINARY N [FUNCTION [ARGS...]] -> instructions callgrind collected (whole program, or FUNCTION and
# callees; FUNCTION "-" for the whole program with ARGS)
ir() {
  b=$1; n=$2; fn=${3:--}; shift 2; [ $# -gt 0 ] && shift
  if [ "$fn" != "-" ]; then
    valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect="$fn" "$D/zc_$b" "$n" "$@" 2>&1
  else
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$D/zc_$b" "$n" "$@" 2>&1
  fi | sed -n 's/^==[0-9]*== Collected : \([0-9][0-9]*\)$/\1/p'
}
# per BINARY -> sets TOT (Ir/iter from totals), FN (Ir/iter inside zc_step), FN1 (zc_step Ir at N1).
# (Program totals at one N are not compared across binaries: start-up code reads argv[0], whose
# length differs with the binary's name.)
per() {
  t1=$(ir "$1" $N1); t2=$(ir "$1" $N2); f1=$(ir "$1" $N1 zc_step); f2=$(ir "$1" $N2 zc_step)
  if [ -z "$t1" ] || [ -z "$t2" ] || [ -z "$f1" ] || [ -z "$f2" ]; then
    echo "zero-cost: FAIL: callgrind gave no count for zc_$1"; exit 1
  fi
  TOT=$(awk -v a="$t1" -v b="$t2" -v n1=$N1 -v n2=$N2 'BEGIN { printf "%.3f", (b - a) / (n2 - n1) }')
  FN=$(awk -v a="$f1" -v b="$f2" -v n1=$N1 -v n2=$N2 'BEGIN { printf "%.3f", (b - a) / (n2 - n1) }')
  FN1=$f1
}
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }
# armed BINARY K -> sets ARM (Ir per iteration, totals, with K hooks armed / K pointers), at fewer
# iterations than per() (16 hooks are slow under callgrind); the step's events run K hooks each
A1=100000
A2=200000
armed() {
  a1=$(ir "$1" $A1 - armed - "$2"); a2=$(ir "$1" $A2 - armed - "$2")
  if [ -z "$a1" ] || [ -z "$a2" ]; then echo "zero-cost: FAIL: callgrind gave no count for zc_$1 armed $2"; exit 1; fi
  ARM=$(awk -v a="$a1" -v b="$a2" -v n1=$A1 -v n2=$A2 'BEGIN { printf "%.3f", (b - a) / (n2 - n1) }')
}
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b + 1e-9) }'; }

echo "zero-cost test: $(sed -n 's/^ZC_CC=//p' "$D/cc.txt" 2>/dev/null) -O2, callgrind Ir, N = $N1 and $N2 iterations"
echo "  zc_step: loop { ctx->global_step = i; <memory clobber>; <site> }, registry = extern global"
echo
per nosite;     base_tot=$TOT; base_fn=$FN; base_fn1=$FN1
per fire;       fire_tot=$TOT; fire_fn=$FN
per active;     act_tot=$TOT;  act_fn=$FN
per fire_off;   foff_tot=$TOT; foff_fn=$FN; foff_fn1=$FN1
per active_off; aoff_tot=$TOT; aoff_fn=$FN; aoff_fn1=$FN1

printf '  %-34s %12s %12s %12s  %s\n' "variant" "Ir/iter" "Ir/iter" "site cost" "verdict"
printf '  %-34s %12s %12s %12s\n' "" "(totals)" "(zc_step)" "(Ir)"
row() { # label tot fn cost verdict
  printf '  %-34s %12s %12s %12s  %s\n' "$1" "$2" "$3" "$4" "$5"
}
row "no site (reference)" "$base_tot" "$base_fn" "-" ""
for pair in "fire:HK_FIRE, nothing registered:$fire_tot:$fire_fn" \
            "active:HK_ACTIVE guard, nothing registered:$act_tot:$act_fn"; do
  id=${pair%%:*}; rest=${pair#*:}; label=${rest%%:*}; rest=${rest#*:}; tot=${rest%%:*}; fn=${rest#*:}
  cost=$(sub "$tot" "$base_tot"); costfn=$(sub "$fn" "$base_fn")
  if le "$cost" $BUDGET && le "$costfn" $BUDGET; then v="ok (budget <= $BUDGET)"
  else v="FAIL (budget <= $BUDGET; zc_step-only: $costfn)"; fail=1; fi
  row "$label" "$tot" "$fn" "$cost" "$v"
done
for pair in "HK_FIRE, -DHK_DISABLE:$foff_tot:$foff_fn:$foff_fn1" \
            "HK_ACTIVE guard, -DHK_DISABLE:$aoff_tot:$aoff_fn:$aoff_fn1"; do
  label=${pair%%:*}; rest=${pair#*:}; tot=${rest%%:*}; rest=${rest#*:}; fn=${rest%%:*}; fn1=${rest#*:}
  cost=$(sub "$tot" "$base_tot")
  if [ "$fn1" = "$base_fn1" ] && [ "$tot" = "$base_tot" ] && [ "$fn" = "$base_fn" ]; then
    v="ok (zc_step Ir at N1: $fn1 = $base_fn1)"
  else v="FAIL (zc_step Ir at N1: $fn1 vs $base_fn1)"; fail=1; fi
  row "$label" "$tot" "$fn" "$cost" "$v"
done
echo

# Machine code: zc_step of each -DHK_DISABLE object against the no-site object, addresses stripped.
dis() {
  objdump -dr --no-show-raw-insn -j .text.zc_step "$D/zc_step_$1.o" |
    sed -n '/<zc_step>:$/,$p' | sed -e '1d' -e '/^$/d' -e 's/^ *[0-9a-f]*:[[:space:]]*//' \
      -e 's/[0-9a-f][0-9a-f]* <zc_step/<zc_step/'
}
dis nosite > "$D/dis_nosite.txt"
nref=$(wc -l < "$D/dis_nosite.txt" | tr -d ' ')
if [ "$nref" -eq 0 ]; then echo "zero-cost: FAIL: no disassembly of zc_step in $D/zc_step_nosite.o"; exit 1; fi
for v in fire_off active_off; do
  dis $v > "$D/dis_$v.txt"
  if cmp -s "$D/dis_nosite.txt" "$D/dis_$v.txt"; then
    echo "  disassembly: zc_step -DHK_DISABLE ($v) is identical to no site ($nref instructions): ok"
  else
    echo "  disassembly: zc_step -DHK_DISABLE ($v) differs from no site: FAIL"
    diff "$D/dis_nosite.txt" "$D/dis_$v.txt" | sed 's/^/    /'
    fail=1
  fi
  refs=$(nm -u "$D/zc_step_$v.o" | awk '{print $NF}' | grep -E '^(hk__dispatch|zc_reg|zc_expensive)$' | tr '\n' ' ')
  if [ -n "$refs" ]; then
    echo "  symbols: zc_step_$v.o still refers to: $refs FAIL"; fail=1
  else
    echo "  symbols: zc_step_$v.o refers to no hk__dispatch, zc_reg or zc_expensive: ok"
  fi
done

# Armed sites against the hand-written loop over as many function pointers (the same hook function).
armed fire 1;   fire1=$ARM
armed fire 16;  fire16=$ARM
armed fnptr 1;  fp1=$ARM
armed fnptr 16; fp16=$ARM
one=$(sub "$fire1" "$base_tot"); lim1=$(sub "$fp1" "$base_tot")
fixed=$(sub "$fire1" "$fp1")
per_hk=$(awk -v a="$fire1" -v b="$fire16" 'BEGIN { printf "%.3f", (b - a) / 15 }')
per_fp=$(awk -v a="$fp1" -v b="$fp16" 'BEGIN { printf "%.3f", (b - a) / 15 }')
extra=$(sub "$per_hk" "$per_fp")
ratio=$(awk -v a="$one" -v b="$lim1" 'BEGIN { printf "%.2f", a / b }')
echo "  armed sites (Ir per site, totals, N = $A1 and $A2), against a hand-written loop over as many pointers:"
if le "$one" "$(awk -v a="$lim1" -v r=$RATIO_BUDGET 'BEGIN { printf "%.3f", a * r }')"; then v="ok (budget <= ${RATIO_BUDGET}x)"
else v="FAIL (budget <= ${RATIO_BUDGET}x)"; fail=1; fi
echo "    1 hook: $one Ir, hand-written loop $lim1 Ir: +$fixed, ${ratio}x: $v"
if le "$extra" $HOOK_BUDGET; then v="ok (budget <= +$HOOK_BUDGET)"; else v="FAIL (budget <= +$HOOK_BUDGET)"; fail=1; fi
echo "    each hook after the first (1 -> 16): $per_hk Ir, hand-written loop $per_fp Ir: +$extra: $v"
echo

# The sites are real: with hooks registered they run N times; compiled out, never.
chk() { # variant expected-calls
  if out=$("$D/zc_$1" 1000 armed "$2" 2>&1); then echo "  armed run: zc_$1 ran its hooks $2 times out of 1000 iterations: ok"
  else echo "  armed run: zc_$1: FAIL: $out"; fail=1; fi
}
chk fire 1000; chk active 1000; chk fire_off 0; chk active_off 0

echo
echo "  generated site (HK_FIRE, nothing registered), zc_step loop from zc_step_fire.o:"
dis fire | sed 's/^/    /'
echo
if [ $fail -ne 0 ]; then echo "zero-cost: FAIL"; exit 1; fi
echo "zero-cost: ok"
