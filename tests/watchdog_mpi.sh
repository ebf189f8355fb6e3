#!/bin/sh
# tests/watchdog_mpi.sh BIN - the watchdog under a real mpirun -np 2 (make test-watchdog-mpi): one rank stuck in
# a hook at step 3, the other waiting for it in a collective.
#   report: rank 0 sleeps 2 s; both ranks report (rank 0: its hook by name; rank 1: the collective it waits in)
#           and the job then ends normally.
#   exit:   rank 1 sleeps for good; its watchdog reports and ends it with status 7, and mpirun ends the job with
#           that status instead of hanging (timeout's 124 would mean a hang).
set -u
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
run() { env $MPI_ENV timeout 60 $MPIRUN --oversubscribe -np 2 "$bin" "$@" > "$out" 2>&1; }
fail() { cat "$out"; echo "test-watchdog-mpi: $1"; exit 1; }

run "watchdog(seconds=0.3)" 0 2; rc=$?
[ $rc = 0 ] || fail "report: mpirun ended with $rc, not 0"
grep -q "^watchdog: rank 0 of 2: no progress for .* at step 3 (epoch 0, batch [0-9]*): in on_train_batch_start, hook 'stuck' running$" "$out" \
  || fail "report: rank 0 did not name its stuck hook"
grep -q "^watchdog: rank 1 of 2: no progress for .* at step 3 (epoch 0, batch [0-9]*): waiting in MPI_Allreduce (the ranks' agreement), after " "$out" \
  || fail "report: rank 1 did not say it waits in a collective"
[ "$(grep -c ': done$' "$out")" = 2 ] || fail "report: not both ranks finished"
echo "test-watchdog-mpi: report: rank 0 stuck in its hook 'stuck', rank 1 waiting in a collective: both reported, the job went on"

run "watchdog(seconds=0.3, action=exit, exit_code=7)" 1 3600; rc=$?
[ $rc = 124 ] && fail "exit: the job hung (timeout ended it)"
[ $rc = 7 ] || fail "exit: mpirun ended with $rc, not the watchdog's 7"
grep -q "^watchdog: rank 1 of 2: no progress for .* at step 3 (epoch 0, batch [0-9]*): in on_train_batch_start, hook 'stuck' running$" "$out" \
  || fail "exit: rank 1 did not name its stuck hook"
grep -q "^watchdog: rank 1 of 2: exiting with status 7 (action=exit)" "$out" || fail "exit: no exit line"
! grep -q ': done$' "$out" || fail "exit: a rank finished"
echo "test-watchdog-mpi: exit: rank 1 stuck for good; its watchdog ended it with 7 and mpirun ended the job with 7 (no hang)"
