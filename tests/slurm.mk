# tests/slurm.mk - clusters: Slurm and preemption (train/cluster.h; included by the top Makefile).
#
#   make test-slurm        a real single-node Slurm cluster (Debian's slurm-wlm and munge, no systemd:
#                          tests/slurm/cluster.sh, up in under 2 s) and three 2-rank jobs in it at once
#                          (tests/slurm/run.sh, sbatch -n 2 with exec mpirun inside): a loop of its own through
#                          the run layer and tr_fit (TRAIN_MPI), each preempted twice with SIGUSR1 to the batch
#                          shell (scancel -s USR1 -b), saving, requeueing itself and resuming by itself: bit-identical
#                          to an uninterrupted run; tr_fit cancelled (SIGTERM): saved, a clean end, resumed
#                          bit-identical. Needs root (the daemons); skips with one line without it.
# In one process (cmocka, plain, ASan+UBSan and valgrind): tests/own_run_cluster.h, part of make test-own-run.
SLURM_DIR_ := $(BUILD)/slurm

.PHONY: test-slurm
TEST_TARGETS += test-slurm

$(SLURM_DIR_)/test_slurm: tests/test_slurm.c hooks.h train.h examples/mlp.h
	@mkdir -p $(SLURM_DIR_)
	@command -v $(MPICC) >/dev/null || { echo "test-slurm: $(MPICC) not found: install openmpi-bin libopenmpi-dev (sh scripts/deps.sh)"; exit 1; }
	$(MPICC) $(TEST_CFLAGS) -o $@ tests/test_slurm.c $(LDLIBS)

test-slurm: $(SLURM_DIR_)/test_slurm tests/slurm/cluster.sh tests/slurm/run.sh
	@timeout 180 bash tests/slurm/run.sh $(SLURM_DIR_)
