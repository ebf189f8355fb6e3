#!/bin/sh
# tests/parts.sh OUTDIR CC FLAGS... - train/'s parts included directly, as a program may instead of train.h:
#   1. each part on its own (what it includes of the earlier parts comes with it), its declarations with
#      every warning, its implementation too (a part alone leaves some shared helpers unused);
#      no part uses a name of a later part, except the trainer, its checkpoints and its strategies
#      (trainer.h declares what checkpoint.h, cuda.h and mpi.h define: the four go together) and factories.h (every battery first);
#   2. every part, in train.h's order, as the implementation of tests/test_train_user.c, which includes
#      train.h: the same program, linked and run.
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
  "$@" -c -o "$out/decl.o" "$out/decl.c"
  { printf '#define HOOKS_IMPLEMENTATION\n#define TRAIN_IMPLEMENTATION\n'
    for f in "train/$p" $with; do printf '#include "%s"\n' "$f"; done; echo 'int tr__parts_impl;'; } > "$out/impl.c"
  "$@" -Wno-unused-function -c -o "$out/impl.o" "$out/impl.c"
  n=$((n + 1))
done
{ printf '/* every part in order: the implementation of tests/test_train_user.c */\n#define HOOKS_IMPLEMENTATION\n#define TRAIN_IMPLEMENTATION\n'
  for p in $parts; do printf '#include "train/%s"\n' "$p"; done; } > "$out/all.c"
"$@" -c -o "$out/all.o" "$out/all.c"
"$@" -c -o "$out/user.o" tests/test_train_user.c
"$@" -o "$out/user" "$out/all.o" "$out/user.o" -lm
"$out/user" "$out/user.ckpt" > "$out/user.out"
# The trainer is a client of the run layer's public API: its parts name nothing private of run.h (no
# tr__run_* function, no tr__run_priv, no run's tr__p).
if grep -nE 'tr__run[a-z_]*|tr__p\b' train/trainer.h train/checkpoint.h train/mpi.h train/cuda.h; then
  echo "parts: the trainer's parts (above) reach into the run layer's private part; use its public API" >&2
  exit 1
fi
echo "parts: $n parts compile on their own; all $(echo "$parts" | wc -l) included directly make tests/test_train_user.c's program, which runs"
