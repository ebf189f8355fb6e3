#!/bin/bash
# tests/slurm/run.sh DIR - preemption under a real Slurm cluster (make test-slurm). DIR holds test_slurm
# (tests/test_slurm.c, built with mpicc -DTRAIN_MPI). One cluster (tests/slurm/cluster.sh), three 2-rank jobs
# at once, each sbatch -n 2 with exec mpirun inside:
#   own, fit  a loop of its own through the run layer, and tr_fit (--requeue): SIGUSR1 to the batch shell
#             (scancel -s USR1 -b, what sbatch --signal=B:USR1@N sends before the time limit) twice; each
#             time the run saves its step, requeues the job (scontrol requeue) and ends; the requeued job
#             resumes from the checkpoint by itself; the final parameters are bit-identical to an
#             uninterrupted run of the same program (mpirun -np 2, outside Slurm);
#   term      tr_fit cancelled (scancel: SIGTERM to every process of the job, SIGKILL KillWait s later): it
#             saves the step and ends cleanly; resumed from that file (mpirun, outside Slurm) it ends
#             bit-identical too;
#   one rank  outside Slurm, meanwhile: SIGUSR1 to rank 1 of 2 alone (kill), in both shapes: rank 0 stops at
#             the same step (tr_fit's vote, tr_run_desc.agree), both save, and the resume is bit-identical.
# And: srun -n 2 --mpi=pmix starts the ranks itself (the run says "task 0 of 2 (srun)"); examples/slurm_job.sh's
# directives pass sbatch --test-only.
set -u
dir=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/cluster.sh"
fail() { echo "test-slurm: FAILED: $*"; for f in "$work"/*.out; do echo "---- $f"; cat "$f"; done; exit 1; }
slurm_up; case $? in 0) ;; 2) exit 0 ;; *) echo "test-slurm: FAILED: the cluster did not start"; exit 1 ;; esac
t0=$(date +%s)
work=$SLURM_DIR/work
mkdir -p "$work"
cp "$dir/test_slurm" "$work/"
cd "$work" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1
# Each mpirun's session directories under a base of its own (OMPI_MCA_orte_tmpdir_base): these run at once, and Open
# MPI 4.1's first mkdir of a shared /tmp/ompi.<host>.<uid> races ("File exists", orte_init failed)
base() { echo "OMPI_MCA_orte_tmpdir_base=$PWD/ompi/$1"; }
STEPS=400

job() { # name mode signals [sbatch options]: submits; prints the job id
  local name=$1 mode=$2 k=$3; shift 3
  sbatch --parsable -n 2 -J "$name" -o "$name.out" --open-mode=append "$@" \
    --wrap "exec env $(base "$name") mpirun -np 2 ./test_slurm $mode steps=$STEPS ckpt=$name.ckpt out=$name.bin mark=$name.m signals=$k"
}
own=$(job own own 2 --requeue) && fit=$(job fit fit 2 --requeue) && term=$(job term fit 1) || fail "sbatch"
# the references, meanwhile: the same runs, uninterrupted, outside Slurm
(unset SLURM_CONF; timeout 60 env $(base ref) mpirun -np 2 ./test_slurm own steps=$STEPS ckpt=own-ref.ckpt out=own-ref.bin > ref.out 2>&1 &&
  timeout 60 env $(base ref) mpirun -np 2 ./test_slurm fit steps=$STEPS ckpt=fit-ref.ckpt out=fit-ref.bin >> ref.out 2>&1) &
refs=$!
# one rank signalled (outside Slurm, while the jobs run): the others must stop with it
one() { # mode
  (unset SLURM_CONF SLURM_JOB_ID; timeout 60 env $(base one) mpirun -np 2 ./test_slurm $1 steps=$STEPS ckpt=one-$1.ckpt out=one-$1.bin \
     mark=one-$1.m signals=1 > one-$1.out 2>&1) & local p=$!
  wait_file one-$1.m.0 && wait_file one-$1.m.pid.1 || return 1
  kill -USR1 "$(cat one-$1.m.pid.1)" || return 1
  wait $p; [ $? = 130 ] || return 1
  grep -q "preempted (SIGUSR1): stopped after step [0-9]*; its state saved to one-$1.ckpt" one-$1.bin.end || return 1
  grep -o 'stopped after step [0-9]*' one-$1.bin.end > one-$1.stop
  rm one-$1.bin.end
  (unset SLURM_CONF SLURM_JOB_ID; timeout 60 env $(base one) mpirun -np 2 ./test_slurm $1 steps=$STEPS ckpt=one-$1b.ckpt out=one-$1.bin \
     resume=one-$1.ckpt > one-$1-resume.out 2>&1) || return 1
}
wait_file() { local end=$(($(date +%s) + 60)); while [ ! -e "$1" ]; do [ "$(date +%s)" -lt $end ] || return 1; sleep 0.05; done; }
(one own && one fit) > one.out 2>&1 &
ones=$!

# Each marker says a run is mid-way (its restart count in the name): signal it then.
for r in 0 1; do
  for name in own fit; do
    id=$(eval echo \$$name)
    wait_file "$name.m.$r" || fail "$name: no marker $name.m.$r (restart $r) within 60 s"
    scancel -s USR1 -b "$id" || fail "scancel -s USR1 -b $id"
    echo "test-slurm: $name (job $id), restart $r: SIGUSR1 to the batch shell mid-run"
  done
  if [ $r = 0 ]; then
    wait_file term.m.0 || fail "term: no marker"
    scancel "$term" || fail "scancel $term"
    echo "test-slurm: term (job $term): scancel (SIGTERM) mid-run"
  fi
done
for name in own fit term; do
  id=$(eval echo \$$name)
  want=COMPLETED; [ $name = term ] && want=CANCELLED
  slurm_wait "$id" "$want|FAILED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY" 90 || fail "$name did not end"
  state=$(slurm_state "$id")
  [ "$state" = $want ] || fail "$name (job $id) ended $state, not $want"
done

wait $refs || fail "the reference runs"
timeout 60 srun -n 2 --mpi=pmix ./test_slurm own steps=50 ckpt=srun.ckpt out=srun.bin > srun.out 2>&1 || fail "srun --mpi=pmix"
grep -q "train.h: Slurm job [0-9]*, restart 0, task 0 of 2 (srun); SIGUSR1 saves to srun.ckpt" srun.out ||
  fail "srun: no start line naming the task"
echo "test-slurm: srun -n 2 --mpi=pmix: the ranks are srun's tasks, and the run says so"
wait $ones || fail "one rank signalled: the ranks did not stop together, save and resume (one-*.out)"
for m in own fit; do
  cmp -s one-$m.bin $m-ref.bin || fail "one rank signalled ($m): the resumed parameters differ from the uninterrupted run's"
  echo "test-slurm: $m, SIGUSR1 to rank 1 alone: both ranks $(cat one-$m.stop), saved; resumed: bit-identical"
done
sbatch --test-only "$here/../../examples/slurm_job.sh" > test-only.out 2>&1 || fail "examples/slurm_job.sh: $(cat test-only.out)"
for name in own fit; do
  restarts=$(scontrol show job "${!name}" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')
  [ "$restarts" = 2 ] || fail "$name: the job restarted $restarts times, not 2"
  # the two requeues are the Restarts above; their line is said at least once: rank 0 writes its end after
  # scontrol returns, while Slurm already kills the requeued job's mpirun (which takes the ranks with it), so
  # on a loaded machine the kill can come first (the state was saved before the requeue: nothing is lost)
  n=$(grep -c "preempted (SIGUSR1): stopped after step [0-9]*; its state saved to $name.ckpt; job ${!name} requeued" $name.bin.end)
  [ "$n" -ge 1 ] || fail "$name: no preemption with a requeue said (2 requeues)"
  grep -q "Slurm job ${!name}, restart 2; SIGUSR1 saves to $name.ckpt and requeues the job; resuming from $name.ckpt" $name.out ||
    fail "$name: no start line of the second restart"
  n=$(grep -c "Restored all states from the checkpoint at $name.ckpt" $name.out)
  [ "$n" = 2 ] || fail "$name: resumed $n times, not 2"
  cmp -s $name.bin $name-ref.bin || fail "$name: the parameters after two preemptions differ from the uninterrupted run's"
  echo "test-slurm: $name: preempted and requeued twice (steps $(grep -o 'stopped after step [0-9]*' $name.bin.end | awk '{print $4}' | tr '\n' ' ')of $STEPS), resumed by itself: bit-identical to the uninterrupted run"
done

grep -q "interrupted (SIGTERM); its state saved to term.ckpt" term.bin.end || fail "term: no clean end with a checkpoint"
step=$(grep -o "fit: ended at step [0-9]*" term.bin.end | awk '{print $5}')
(unset SLURM_CONF; timeout 60 env $(base term) mpirun -np 2 ./test_slurm fit steps=$STEPS ckpt=term2.ckpt out=term.bin resume=term.ckpt > term-resume.out 2>&1) ||
  fail "term: the resume from term.ckpt"
cmp -s term.bin fit-ref.bin || fail "term: resumed from the SIGTERM's checkpoint, the parameters differ from the uninterrupted run's"
echo "test-slurm: term: scancel's SIGTERM at step $step: its state saved, a clean end; resumed from it: bit-identical"
# a loop of its own: the ranks resume two files with the same counters (the first model byte changed): every rank
# refuses before a step (last, alone: Open MPI's session directory races with mpiruns started at the same moment)
cp one-own.ckpt two.0.ckpt && cp one-own.ckpt two.1.ckpt && printf 'A' | dd of=two.1.ckpt bs=1 conv=notrunc 2>/dev/null ||
  fail "two: copying one-own.ckpt"
(unset SLURM_CONF SLURM_JOB_ID; timeout 60 env $(base two) mpirun -np 2 ./test_slurm own steps=$STEPS ckpt=two-b.ckpt out=two.bin \
   resume=two.%d.ckpt > two.out 2>&1); rc=$?
[ $rc = 1 ] && grep -q "the ranks resumed different states\|another rank resumed a different state" two.out ||
  fail "two: ranks resuming two files (exit $rc, not 1, or no message)"
echo "test-slurm: own, the ranks resuming two files with the same counters: every rank refuses before a step"
echo "test-slurm: passed in $(($(date +%s) - t0)) s (the cluster was up and its node idle in $SLURM_READY_MS ms)"
