#!/bin/bash
# examples/slurm_job.sh - a training job that survives its time limit and preemption under Slurm.
#
#   sbatch examples/slurm_job.sh          (from the repository, after: mpicc -O2 -I. examples/train_mpi.c -o build/train_mpi -lm)
#
# --signal=B:USR1@120: Slurm sends SIGUSR1 to this script 120 s before the time limit. exec hands it to
# mpirun, which passes SIGUSR1 on to every rank. The program's run (tr_fit with tr_config.preempt, or a
# loop of yours with tr_run_desc.preempt) finishes its step on every rank, saves it to save_to, and with
# .requeue = TR_YES runs `scontrol requeue $SLURM_JOB_ID`: the job goes back in the queue (--requeue
# allows it) and, started again with SLURM_RESTART_COUNT=1, 2, ..., resumes from save_to by itself.
# A preemption by the scheduler (SIGTERM, SIGKILL KillWait seconds later) saves the step the same way.
#
#SBATCH --job-name=train
#SBATCH --ntasks=4
#SBATCH --time=04:00:00
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=train-%j.out

# the checkpoint must be on a file system every node of the next run sees
exec mpirun -np "$SLURM_NTASKS" build/train_mpi ckpt="$HOME/ckpt/train.ckpt"
# or, with Slurm's PMIx (Debian's Open MPI): exec srun --mpi=pmix build/train_mpi ckpt=...
