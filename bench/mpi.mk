# bench/mpi.mk - train.h's MPI strategy: time per step with 1 and 2 ranks, and the gradient point
# through train.h against a bare MPI_Allreduce of the same bytes, in the same run (bench/bench_mpi.c).
#   make bench-mpi                    (hidden width: make bench-mpi BENCH_MPI_HIDDEN=8192)
BENCH_MPI_HIDDEN ?= 4096

.PHONY: bench-mpi
BENCH_TARGETS += bench-mpi

$(BUILD)/bench_mpi: bench/bench_mpi.c hooks.h train.h examples/mlp.h | $(BUILD)
	$(MPICC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS)

bench-mpi: $(BUILD)/bench_mpi
	@echo "bench-mpi: spirals MLP 2-$(BENCH_MPI_HIDDEN)-3 ($$((6 * $(BENCH_MPI_HIDDEN) + 3)) floats of gradients), batch 16 per rank, medians of 1000 steps"
	@echo "ranks  time/step      gradient point   bare MPI_Allreduce   bare all-reduce+average   train.h's extra (paired median)"
	@$(MPI_ENV) timeout 300 $(MPIRUN) --oversubscribe -np 1 $(BUILD)/bench_mpi $(BENCH_MPI_HIDDEN)
	@$(MPI_ENV) timeout 300 $(MPIRUN) --oversubscribe -np 2 $(BUILD)/bench_mpi $(BENCH_MPI_HIDDEN)
