#!/bin/sh
# tests/math_ref_check.sh OBJ - make bench-math's reference loops are vectorised (make test-math-ref).
#
# OBJ is bench/math_ref.c compiled exactly as make bench-math compiles it. For each reference loop
# (ref_axpy_range, ref_triad_range, ref_copy_range, ref_read_range) and each copy the compiler made
# of it (.default, .avx2 with target_clones), the disassembly must hold a loop -- a backward branch --
# whose body has packed SIMD instructions: a packed multiply and a packed add (or a fused
# multiply-add) for the axpy and the triad, packed loads and stores for the copy, a packed add for
# the read. A scalar reference (mulss/addss, what a
# loop without restrict gets at -O2) makes every ratio of the bench flatter than it is: this fails.
set -u
OBJ=${1:?usage: math_ref_check.sh OBJ}
command -v objdump >/dev/null 2>&1 || { echo "math-ref: FAIL: objdump not found (binutils)"; exit 1; }
[ -f "$OBJ" ] || { echo "math-ref: FAIL: $OBJ missing"; exit 1; }
DIS=$(objdump -d --no-show-raw-insn "$OBJ") || { echo "math-ref: FAIL: objdump $OBJ"; exit 1; }
fail=0
for fn in ref_axpy_range ref_triad_range ref_copy_range ref_read_range; do
  case $fn in ref_copy_range) need=copy ;; ref_read_range) need=add ;; *) need=muladd ;; esac
  # every symbol of this loop: the function itself or its clones, not the ifunc resolver
  syms=$(printf '%s\n' "$DIS" | sed -n "s/^[0-9a-f]* <\($fn\(\.[a-z0-9_]*\)\{0,1\}\)>:$/\1/p" | grep -v '\.resolver$')
  if [ -z "$syms" ]; then echo "math-ref: FAIL: $fn is not in $OBJ"; fail=1; continue; fi
  for s in $syms; do
    verdict=$(printf '%s\n' "$DIS" | awk -v sym="$s" -v need="$need" '
      function hex(x,   i, v) { v = 0; for (i = 1; i <= length(x); i++) v = v * 16 + index("0123456789abcdef", substr(x, i, 1)) - 1; return v }
      $0 ~ "^[0-9a-f]+ <" sym ">:$" { on = 1; n = 0; next }
      on && /^$/ { on = 0 }
      on && /^ *[0-9a-f]+:/ {
        a = $1; sub(":", "", a); addr[n] = hex(a)
        line = $0; sub(/^ *[0-9a-f]+:[ \t]*/, "", line); ins[n] = line; n++
      }
      END {
        best = ""
        for (i = 0; i < n; i++) {
          split(ins[i], w, /[ \t]+/)
          if (w[1] !~ /^j/ || w[2] !~ /^[0-9a-f]+$/) continue
          t = hex(w[2])
          if (t >= addr[i] || t < addr[0]) continue          # not a backward branch in this function
          mul = 0; add = 0; fma = 0; ld = 0; st = 0
          for (k = 0; k <= i; k++) {
            if (addr[k] < t) continue
            split(ins[k], v, /[ \t]+/); m = v[1]; ops = v[2]
            if (m ~ /^v?mulps$/) mul = 1
            if (m ~ /^v?addps$/) add = 1
            if (m ~ /^vf(n)?madd[0-9]*ps$/) fma = 1
            if (m ~ /^v?mov(u|a)ps$/ || m ~ /^v?movdq(u|a)$/) {
              if (ops ~ /^%[xyz]mm[0-9]+,/) st = 1; else if (ops ~ /,%[xyz]mm[0-9]+$/) ld = 1
            }
          }
          if (need == "muladd" && ((mul && add) || fma)) best = "vectorised"
          if (need == "copy" && ld && st) best = "vectorised"
          if (need == "add" && add) best = "vectorised"
        }
        print best == "" ? "scalar" : best
      }')
    if [ "$verdict" = vectorised ]; then echo "  $s: packed SIMD in its loop: ok"
    else echo "  $s: no loop with packed SIMD instructions: FAIL"; fail=1; fi
  done
done
if [ $fail -ne 0 ]; then
  echo "math-ref: FAIL: a reference loop of make bench-math is not vectorised (restrict? an inner block of constant length?)"
  exit 1
fi
echo "math-ref: ok"
