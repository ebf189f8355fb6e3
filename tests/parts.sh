#!/bin/sh
# tests/parts.sh OUTDIR CC FLAGS... - train/'s parts included directly, as a program may instead of train.h:
#   1. each part on its own (what it includes of the earlier parts comes with it), its declarations with
#      every warning, its implementation too (a part alone leaves some shared helpers unused);
#      no part uses a name of a later part, except the trainer, its checkpoints and its strategies
#      (trainer.h declares what checkpoint.h, cuda.h and mpi.h define: the four go together) and factories.h (every battery first);
#      each compiled as a program that includes parts compiles it: TRAIN_ONLY_SPECIFIC_BATTERIES and a
#      TRAIN_ENABLE_<NAME> for each battery it includes;
#   2. every part, in train.h's order, as the implementation of tests/test_train_user.c, which includes
#      train.h: the same program, linked and run;
#   3. train/run.h and one battery part (a callback, a logger), linked and run.
set -eu
out=$1; shift
mkdir -p "$out"
parts=$(python3 scripts/amalgamate.py --order)
n=0
for p in $parts; do
  case $p in factories.h|cuda.h|mpi.h) continue ;; esac
  with=""
  case $p in trainer.h|checkpoint.h|callbacks/lr_finder.h) with="train/trainer.h train/checkpoint.h train/cuda.h train/mpi.h" ;; esac
  { for f in "train/$p" $with; do printf '#include "%s"\n' "$f"; done; echo 'int tr__parts_decl;'; } > "$out/decl.c"
  # the batteries it includes, named as a program that includes parts names them (README, train/battery.h)
  names=$("$@" -MM "$out/decl.c" | tr ' \\' '\n\n' | sed -n 's#^train/\(callbacks\|loggers\)/\([a-z_]*\)\.h$#\2#p' |
          grep -vx file_loggers | tr a-z A-Z | sed 's/^/-DTRAIN_ENABLE_/')
  "$@" -DTRAIN_ONLY_SPECIFIC_BATTERIES $names -c -o "$out/decl.o" "$out/decl.c"
  { printf '#define HOOKS_IMPLEMENTATION\n#define TRAIN_IMPLEMENTATION\n'
    for f in "train/$p" $with; do printf '#include "%s"\n' "$f"; done; echo 'int tr__parts_impl;'; } > "$out/impl.c"
  "$@" -DTRAIN_ONLY_SPECIFIC_BATTERIES $names -Wno-unused-function -c -o "$out/impl.o" "$out/impl.c"
  n=$((n + 1))
done
{ printf '/* every part in order: the implementation of tests/test_train_user.c */\n#define HOOKS_IMPLEMENTATION\n#define TRAIN_IMPLEMENTATION\n'
  for p in $parts; do printf '#include "train/%s"\n' "$p"; done; } > "$out/all.c"
"$@" -c -o "$out/all.o" "$out/all.c"
"$@" -c -o "$out/user.o" tests/test_train_user.c
"$@" -o "$out/user" "$out/all.o" "$out/user.o" -lm
"$out/user" "$out/user.ckpt" > "$out/user.out"
# 3. train/run.h and one battery part, as the README says (issue 37, item 16: the unused factory failed -Werror and
#    tr_add_factories was undefined without train/factories.h): every warning, no -Wno-unused-function; compiled,
#    linked and run: the battery's spec works, another's is refused naming its define.
for b in "callbacks/early_stopping:EARLY_STOPPING:early_stopping(monitor=val/loss):csv" "loggers/csv:CSV:csv(save_dir=$out/runs):timer"; do
  part=${b%%:*} rest=${b#*:}; NAME=${rest%%:*} rest=${rest#*:}; spec=${rest%%:*} other=${rest#*:}
  cat > "$out/one.c" <<EOF
#define TRAIN_ONLY_SPECIFIC_BATTERIES
#define TRAIN_ENABLE_$NAME
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train/run.h"
#include "train/$part.h"
int main(void) {
  hk_registry *reg = hk_create(NULL);
  tr_run_desc d;
  int ok;
  memset(&d, 0, sizeof d);
  d.max_steps = 1;
  d.no_signals = 1;
  if (!reg || tr_run_setup(reg, &d) != TR_OK || hk_spec_apply(reg, "$spec") != HK_OK) return 1;
  ok = hk_spec_apply(reg, "$other()") != HK_OK && strstr(hk_last_error(reg), "TRAIN_ENABLE_") != NULL;
  hk_destroy(reg);
  return ok ? 0 : 2;
}
EOF
  "$@" -o "$out/one" "$out/one.c" -lm
  "$out/one" || { echo "parts: train/run.h + train/$part.h: the program failed" >&2; exit 1; }
done

# The trainer is a client of the run layer's public API: its parts name nothing private of run.h (no
# tr__run_* function, no tr__run_priv, no run's tr__p).
if grep -nE 'tr__run[a-z_]*|tr__p\b' train/trainer.h train/checkpoint.h train/mpi.h train/cuda.h; then
  echo "parts: the trainer's parts (above) reach into the run layer's private part; use its public API" >&2
  exit 1
fi
echo "parts: $n parts compile on their own; run.h + one battery part links and runs; all $(echo "$parts" | wc -l) included directly make tests/test_train_user.c's program, which runs"
