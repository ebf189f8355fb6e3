#!/bin/sh
# tests/fresh_clone.sh DIR - make demo on a fresh clone, without python3. A clone's parts under train/ can be
# newer than the committed train.h; no target a user runs may then regenerate it (that needs python3): only
# `make train.h` does. The tracked files are copied into DIR, train/ is touched newer than train.h, and a
# `python3` that records its call and fails comes first on PATH.
set -eu
d=$1
rm -rf "$d"; mkdir -p "$d/clone" "$d/bin"
git ls-files -z | xargs -0 tar cf - | tar xf - -C "$d/clone"
touch -d '2001-01-01' "$d/clone/train.h"
find "$d/clone/train" -type f -exec touch {} +
printf '#!/bin/sh\necho "python3 $*" >> "%s/python3-calls"\necho "python3: No such file or directory" >&2\nexit 127\n' \
  "$(cd "$d" && pwd)" > "$d/bin/python3"
chmod 755 "$d/bin/python3"
cd "$d/clone"
export PATH="$(cd ../bin && pwd):$PATH"
# (-O0: what is checked is which files the build uses; train-examples builds the demo with the default flags)
make demo CFLAGS='-std=c99 -O0' > ../demo.txt 2>&1 || { cat ../demo.txt; echo "fresh_clone: make demo failed on a clone without python3"; exit 1; }
# every other build a user runs: nothing in its plan may regenerate train.h
make -n examples install test-all DESTDIR=/nonexistent > ../plan.txt 2>&1 || { tail ../plan.txt; exit 1; }
if grep -n 'amalgamate\.py *$' ../plan.txt; then echo "fresh_clone: a build would regenerate train.h (above)"; exit 1; fi
if [ -s ../python3-calls ]; then cat ../python3-calls; echo "fresh_clone: make demo called python3"; exit 1; fi
echo "fresh_clone: make demo on a clone with train/ newer than train.h, without python3: ok"
