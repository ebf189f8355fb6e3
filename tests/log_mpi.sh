#!/bin/sh
# tests/log_mpi.sh BIN DIR - callbacks' verbose lines under mpirun (2 and 3 ranks sharing stderr): every
# line whole and "[rank: N] " first; model_checkpoint's lines and those of an early_stopping with
# log_rank_zero_only from rank 0 only; an early_stopping without it on every rank.
set -u
bin=$1 dir=$2
for w in 2 3; do
  rm -rf "$dir" && mkdir -p "$dir"
  env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
      OMPI_MCA_btl_vader_single_copy_mechanism=none \
      timeout 60 ${MPIRUN:-mpirun} --oversubscribe -np $w "$bin" --mpi-verbose "$dir/ck" > "$dir/out" 2>&1 \
    || { cat "$dir/out"; echo "log_mpi: mpirun -np $w failed"; exit 1; }
  python3 - "$dir/out" $w <<'PY' || exit 1
import re, sys
lines = open(sys.argv[1]).read().splitlines()
w = int(sys.argv[2])
improved, other, saves = set(), 0, 0
for l in lines:
    m = re.fullmatch(r"\[rank: (\d+)\] (early_stopping|model_checkpoint): (.*)", l)
    assert m and l.count(": ") >= 2 and l.count("early_stopping:") + l.count("model_checkpoint:") == 1, "a torn or unprefixed line: %r" % l
    rank, who, msg = int(m.group(1)), m.group(2), m.group(3)
    if who == "model_checkpoint":
        assert rank == 0, "model_checkpoint spoke on rank %d: %r" % (rank, l); saves += 1
    elif msg.startswith("'other' is not set"):
        assert rank == 0, "log_rank_zero_only early_stopping spoke on rank %d" % rank; other += 1
    elif msg.startswith("Metric val/loss improved"):
        improved.add(rank)
assert improved == set(range(w)), "early_stopping lines from ranks %r, want every one of %d" % (sorted(improved), w)
assert other == 3 and saves >= 3, "rank 0: %d rank-zero-only early_stopping lines (want 3), %d model_checkpoint lines" % (other, saves)
print("log_mpi: %d ranks: %d lines, all whole with [rank: N]; rank-zero-only ones from rank 0 alone" % (w, len(lines)))
PY
done
