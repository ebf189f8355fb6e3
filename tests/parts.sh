#!/bin/sh
# tests/parts.sh OUTDIR CC FLAGS... - train/'s parts included directly, as a program may instead of train.h:
#   1. each part on its own (what it includes of the earlier parts comes with it): its declarations compiled with
#      every warning; its implementation checked by CC and by clang (-fsyntax-only: at -O0 the code generator adds
#      no check, and clang names unused static variables that gcc finds only when it generates code; a part alone
#      leaves some shared helpers unused, so not -Wunused-function).
#      Each is compiled as a program that includes parts compiles it: TRAIN_ONLY_SPECIFIC_BATTERIES
#      and a TRAIN_ENABLE_<NAME> for each battery it includes. trainer/cuda.h also with TRAIN_CUDA (the kernels'
#      declarations; TRAIN_CUDA_NO_KERNELS: no nvcc), trainer/mpi.h also with TRAIN_MPI (mpi.h from mpicc's include path);
#   2. every part, in train.h's order, as the implementation of tests/test_train_user.c, which includes
#      train.h: the same program, linked and run;
#   3. train/run.h and one battery part (a callback, a logger), linked and run;
#   4. the trainer's parts (train/trainer/) use nothing private of the run layer (every tr__ name that
#      train/run.h's implementation defines);
#   5. the generator refuses a line it would drop (scripts/amalgamate.py on a copy of train/ with a line after a
#      part's implementation block);
#   6. no part names what a later part defines (the parts read in order: no forward prototype, no circle).
set -eu
out=$1; shift
mkdir -p "$out"
parts=$(python3 scripts/amalgamate.py --order)
CLANG=${PARTS_CLANG:-clang}
mpi_inc=$(mpicc --showme:incdirs 2>/dev/null | tr ' ' '\n' | sed -n 's/^./-I&/p' | tr '\n' ' ') || mpi_inc=
n=0
# alone PART [DEFINES...]
alone() {
  p=$1; shift
  { printf '#include "train/%s"\nint tr__parts_decl;\n' "$p"; } > "$out/decl.c"
  { printf '#define HOOKS_IMPLEMENTATION\n#define TRAIN_IMPLEMENTATION\n'
    printf '#include "train/%s"\nint tr__parts_impl;\n' "$p"; } > "$out/impl.c"
  # the batteries it includes, named as a program that includes parts names them (README, train/battery.h)
  names=$("$CC" "$@" $CFLAGS -MM "$out/decl.c" | tr ' \\' '\n\n' | sed -n 's#^train/\(callbacks\|loggers\)/\([a-z_]*\)\.h$#\2#p' |
          grep -vx file_loggers | tr a-z A-Z | sed 's/^/-DTRAIN_ENABLE_/')
  "$CC" $CFLAGS "$@" -DTRAIN_ONLY_SPECIFIC_BATTERIES $names -c -o "$out/decl.o" "$out/decl.c" ||
    { echo "parts: train/$p $*: its declarations do not compile on their own" >&2; exit 1; }
  for c in "$CC" "$CLANG"; do
    "$c" $CFLAGS "$@" -DTRAIN_ONLY_SPECIFIC_BATTERIES $names -Wno-unused-function -fsyntax-only "$out/impl.c" ||
      { echo "parts: train/$p $*: its implementation does not compile on its own ($c)" >&2; exit 1; }
  done
}
CC=$1; shift; CFLAGS=$*
for p in $parts; do
  alone "$p"
  case $p in
    trainer/cuda.h) alone "$p" -DTRAIN_CUDA -DTRAIN_CUDA_NO_KERNELS ;;
    trainer/mpi.h) if [ -n "$mpi_inc" ]; then alone "$p" -DTRAIN_MPI $mpi_inc; else echo "parts: mpi.h with TRAIN_MPI: skipped (no mpicc)"; fi ;;
  esac
  n=$((n + 1))
done
set -- "$CC" $CFLAGS
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

# 4. The trainer is a client of the run layer's public API: its parts (train/trainer/) name nothing that
#    train/run.h's implementation defines (every tr__ function, macro, variable and type there).
python3 - train/run.h train/trainer/*.h <<'PY'
import re, sys
src = open(sys.argv[1]).read()
impl = src[src.index('#ifdef TRAIN_IMPLEMENTATION /* implementation */'):]
private = set(re.findall(r'^(?:static|TR__SHARED)\b[^;{=(]*?\b(tr__\w+)\s*\(', impl, re.M))         # functions
private |= set(re.findall(r'^#\s*define\s+(tr__\w+)', impl, re.M))                                   # macros
private |= set(re.findall(r'^static\b[^;({]*?\b(tr__\w+)\s*(?:\[[^\]]*\])*\s*[=;]', impl, re.M))      # variables
private |= set(re.findall(r'^(?:typedef\s+)?(?:struct|enum|union)\s+(tr__\w+)\s*\{', impl, re.M))    # types
private |= set(re.findall(r'^\}\s*(tr__\w+)\s*;', impl, re.M))
if len(private) < 50 or not {'tr__run_priv', 'tr__run_say'} <= private:
    sys.exit('parts: found only %d private names in %s: the pattern no longer reads it' % (len(private), sys.argv[1]))
bad = 0
for path in sys.argv[2:]:
    text = open(path).read()
    for name in sorted(set(re.findall(r'\b(tr__\w+)\b', text)) & private):
        line = text[:re.search(r'\b%s\b' % name, text).start()].count('\n') + 1
        print('%s:%d: %s is private to train/run.h' % (path, line, name)); bad = 1
if bad:
    sys.exit("parts: the trainer's parts (above) reach into the run layer's private part; use its public API")
print("parts: the trainer's parts name none of the %d private names of train/run.h" % len(private))
PY

# 6. The parts read in order: no part names a function or macro that a later part defines (no forward
#    prototype, no circle), in its code (comments and strings aside). One exception, named here: the run layer
#    registers every battery's factory (tr_run_setup calls tr_add_factories, train/factories.h), so that spec
#    strings work in any loop at once.
python3 - $parts <<'PY'
import re, sys
ALLOWED = {('run.h', 'tr_add_factories')}
parts = sys.argv[1:]
def code(p):
    s = open('train/' + p).read()
    s = re.sub(r'/\*.*?\*/', ' ', s, flags=re.S)
    s = re.sub(r'//[^\n]*', ' ', s)
    s = re.sub(r'"(\\.|[^"\\\n])*"', '""', s)
    return re.sub(r'(->|\.)\s*\w+', ' ', s)                    # a member is not a name of a part
src = {p: code(p) for p in parts}
owner = {}
for p in parts:
    for m in re.finditer(r'^(?:static|TRAIN_API|TR__SHARED)\b[^;{=]*?\b(tr_\w+)\s*\([^;{]*\)\s*(?:TR__\w+\([^)]*\)\s*)?\{', src[p], re.M | re.S):
        owner.setdefault(m.group(1), p)
    for m in re.finditer(r'^#\s*define\s+(tr_\w+|TR_\w+)', src[p], re.M):
        owner.setdefault(m.group(1), p)
if len(owner) < 500:
    sys.exit('parts: found only %d definitions in the parts: the pattern no longer reads them' % len(owner))
bad = 0
for i, p in enumerate(parts):
    for name in sorted(set(re.findall(r'\b(tr_\w+|TR_\w+)\b', src[p]))):
        q = owner.get(name)
        if q and parts.index(q) > i and (p, name) not in ALLOWED:
            print('train/%s names %s, which the later train/%s defines' % (p, name, q)); bad = 1
if bad:
    sys.exit('parts: a part uses a later one (above): move the name to the part it belongs to, before its users, or hand it over '
             '(a function pointer)')
print('parts: no part names what a later part defines (%d definitions; the one exception: run.h registers the factories)' % len(owner))
PY

# 5. The generator refuses a line it would drop: a copy of train/ with a line after a part's implementation block
#    (make train.h's mode and --check's), the part and the line named; the copy unchanged, fresh again, passes.
rm -rf "$out/gen" && mkdir -p "$out/gen" && cp -r scripts train train.h "$out/gen/"
python3 "$out/gen/scripts/amalgamate.py" --check || { echo "parts: the copy of train/ is not fresh" >&2; exit 1; }
last=$(wc -l < "$out/gen/train/callbacks/timer.h")
echo 'int tr__dropped;' >> "$out/gen/train/callbacks/timer.h"
for mode in "" --check; do
  if python3 "$out/gen/scripts/amalgamate.py" $mode > "$out/gen.out" 2>&1; then
    echo "parts: scripts/amalgamate.py $mode took a line after train/callbacks/timer.h's implementation block" >&2; exit 1; fi
  grep -q "^train/callbacks/timer.h:$((last + 1)): a line after the part's implementation block would be left out of train.h: .*int tr__dropped;" "$out/gen.out" ||
    { cat "$out/gen.out"; echo "parts: scripts/amalgamate.py $mode refused without naming the part and the line" >&2; exit 1; }
done
cmp -s train.h "$out/gen/train.h" || { echo "parts: the refusing generator wrote train.h" >&2; exit 1; }
echo "parts: the generator refuses a line after a part's implementation block, naming the part and the line"
echo "parts: $n parts compile on their own; run.h + one battery part links and runs; all $(echo "$parts" | wc -l) included directly make tests/test_train_user.c's program, which runs"
